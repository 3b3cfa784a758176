"""The triage agent: one handler that uses every durable primitive of the handler API.

A support ticket arrives as a run of contract ``triage``. The agent

1. parses it (``run.step``);
2. asks a person whether to send the customer a question (``run.wait_for_approval``: the
   draft is the request's payload, which the reviewer may edit; a rejection or an expiry
   returns to the handler, which then goes on without asking);
3. sends the question (a step) and waits for the customer's reply, ``run.wait_for_event("reply",
   timeout=...)``: a signal sent with ``awooop runs signal``, the management API's signal
   route or ``producer.signal``, else the timeout;
4. fans out three lookups as child runs of contract ``lookup`` (``run.start_child``), each one
   tool call (``run.wait_for_tool``), and waits for them (``run.wait_for_children``);
5. checks the status page, a flaky service: when a try fails it sleeps (``run.sleep``, holding
   no worker slot or lease while it waits) and tries again, each try a step;
6. has the model summarise (``run.llm`` inside a step) and streams the summary to readers of
   the run's output (``run.emit_output``), once the waits are behind it so that it is emitted
   once.

Each wait ends the attempt; the next attempt runs the handler from the top and every journaled
step, decision, reply, child and sleep replays. One handler serves both contracts (it
dispatches on ``run.contract_id``), so one worker runs the agent and its lookups::

    awooop worker --handler awooop.examples.triage:handle --contract triage --contract lookup

Input (JSON): ``ticket`` (an id), ``customer``, ``text``; for demos and tests,
``reply_timeout_s`` (default a day), ``retry_s`` (the status page's backoff, 2 s) and
``flaky_tries`` (how many tries of the stand-in status page fail, 1). The tools are stand-ins
answering canned data; ``make demo`` runs two tickets, one the customer answers and one that
times out (awooop/demo/triage_phase.py). Approval tickets go where :mod:`handlers`' go.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import Any

from awooop.core.errors import EventWaitTimeoutError
from awooop.examples.handlers import notify_approval
from awooop.worker.context import RunContext

TRIAGE = "triage"  # the agent's contract
LOOKUP = "lookup"  # the contract of its child runs
LOOKUPS = ("account", "incidents", "runbook")
STATUS_TRIES = 3
DAY_S = 86400.0


async def handle(run: RunContext) -> dict[str, Any]:
    """Both contracts: a ``lookup`` run is one tool call, any other run is the agent."""
    if run.contract_id == LOOKUP:
        return await lookup(run)
    return await triage(run)


async def triage(run: RunContext) -> dict[str, Any]:
    options: Mapping[str, Any] = run.input if isinstance(run.input, dict) else {}

    async def parse() -> dict[str, str]:
        return parse_ticket(options)

    ticket = await run.step("parse", parse)
    conversation = await ask_customer(run, ticket, float(options.get("reply_timeout_s", DAY_S)))
    found = await look_up(run, ticket)
    status = await status_page(
        run, float(options.get("retry_s", 2.0)), int(options.get("flaky_tries", 1))
    )

    async def summarise() -> str:
        facts = compose(ticket, conversation, found, status)
        answer = await run.llm(f"One line for the on-call engineer about:\n{facts}")
        return f"{facts}model: {answer.text.strip()}\n"

    summary = await run.step("summarise", summarise)
    for line in summary.splitlines(keepends=True):  # read live: awooop runs output --follow
        await run.emit_output(line)
    return {
        "ticket": ticket["id"],
        "conversation": conversation,
        "lookups": found,
        "status": status,
        "summary": summary,
    }


async def ask_customer(
    run: RunContext, ticket: Mapping[str, str], timeout_s: float
) -> dict[str, Any]:
    """A person approves (or edits, or declines) the question; then the customer's reply, or
    none by the timeout."""
    draft = {"question": f"About {ticket['id']}: when did it start, and what do you see?"}
    decision = await run.wait_for_approval(
        "ask_customer",
        reason=f"ask {ticket['customer']} about {ticket['id']}",
        payload=draft,
        notify=notify_approval,
        on_reject="return",
        on_expire="return",
    )
    if not decision.approved:
        return {"asked": None, "reply": None, "outcome": "not asked"}
    edited = decision.payload if isinstance(decision.payload, dict) else draft
    question = str(edited.get("question") or draft["question"])

    async def send() -> dict[str, str]:
        run.log.info("question_sent", to=ticket["customer"], question=question)  # mail, chat
        return {"to": ticket["customer"], "question": question}

    await run.step("ask", send)
    try:
        reply = await run.wait_for_event("reply", timeout=timedelta(seconds=timeout_s))
    except EventWaitTimeoutError:
        return {"asked": question, "reply": None, "outcome": "no reply"}
    return {"asked": question, "reply": text_of(reply), "outcome": "replied"}


async def look_up(run: RunContext, ticket: Mapping[str, str]) -> dict[str, Any]:
    """Three child runs of contract ``lookup``, and their outcomes by key."""
    handles = [
        await run.start_child(LOOKUP, {"lookup": name, "customer": ticket["customer"]}, key=name)
        for name in LOOKUPS
    ]
    results = await run.wait_for_children(handles)
    return {r.key: r.result if r.ok else {"failed": r.failure_code} for r in results}


async def status_page(run: RunContext, retry_s: float, flaky_tries: int) -> dict[str, Any]:
    """Up to :data:`STATUS_TRIES` tries of a flaky call, a durable sleep between two. (For a
    backoff of a second inside one attempt, ``run.step(..., retry=Retry(...))`` is simpler; a
    durable sleep frees the worker for a backoff of minutes or hours.)"""
    n = 1
    while True:

        async def check(n: int = n) -> dict[str, Any]:
            try:
                return {"ok": True, "status": await fetch_status(n, flaky_tries), "tries": n}
            except ConnectionError as exc:
                return {"ok": False, "error": str(exc), "tries": n}

        outcome: dict[str, Any] = await run.step(f"status:{n}", check)
        if outcome["ok"] or n == STATUS_TRIES:
            return outcome
        await run.sleep(timedelta(seconds=retry_s))  # step sleep:<n>; the attempt ends here
        n += 1


async def lookup(run: RunContext) -> dict[str, Any]:
    """A child run: one tool call (WAITING_TOOL while it runs, its answer journaled)."""
    options: Mapping[str, Any] = run.input if isinstance(run.input, dict) else {}
    what = str(options.get("lookup"))
    tool = TOOLS.get(what)
    if tool is None:
        raise ValueError(f"no lookup named {what!r} (one of {', '.join(LOOKUPS)})")
    customer = str(options.get("customer", ""))
    return await run.wait_for_tool(what, lambda: tool(customer))


# --- pure helpers and the stand-in services ----------------------------------------------------


def text_of(payload: Any) -> str:
    if isinstance(payload, dict) and isinstance(payload.get("text"), str):
        return str(payload["text"])
    return "" if payload is None else str(payload)


def parse_ticket(options: Mapping[str, Any]) -> dict[str, str]:
    return {
        "id": str(options.get("ticket") or "ticket"),
        "customer": str(options.get("customer") or "unknown"),
        "text": text_of(options)[:2000],
    }


def compose(
    ticket: Mapping[str, str],
    conversation: Mapping[str, Any],
    found: Mapping[str, Any],
    status: Mapping[str, Any],
) -> str:
    """Pure: the summary's facts, one line each."""
    said = conversation["reply"] if conversation["reply"] else conversation["outcome"]
    looked = "; ".join(f"{key}: {brief(value)}" for key, value in found.items())
    checked = status.get("status") or status.get("error")
    return (
        f"{ticket['id']} from {ticket['customer']}: {ticket['text']}\n"
        f"customer: {said}\n"
        f"lookups: {looked}\n"
        f"status page: {checked} (try {status['tries']})\n"
    )


def brief(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items() if k != "customer")
    return str(value)


async def account(customer: str) -> dict[str, Any]:
    return {"customer": customer, "plan": "business", "seats": 40}


async def incidents(customer: str) -> dict[str, Any]:
    return {"open": 1, "latest": "INC-7 dashboard latency"}


async def runbook(customer: str) -> dict[str, Any]:
    return {"title": "blank dashboard", "url": "https://runbooks.example/blank-dashboard"}


TOOLS: dict[str, Callable[[str], Awaitable[dict[str, Any]]]] = {
    "account": account,
    "incidents": incidents,
    "runbook": runbook,
}


async def fetch_status(attempt: int, flaky_tries: int) -> str:
    """The stand-in status page: its first ``flaky_tries`` tries fail."""
    if attempt <= flaky_tries:
        raise ConnectionError("status page answered 503 Service Unavailable")
    return "all systems operational"
