"""The demo's triage phase: the example triage agent (awooop/examples/triage.py) on a worker of
its own, routed by contract (``--contract triage --contract lookup``; the other workers serve
``default``).

Two tickets arrive through the API channel as runs of contract ``triage``. A person approves
each question to the customer through the management API (one of them edited); one customer
answers (a signal through the signal route), the other does not (the reply's timeout, a few
seconds here). Each run then fans out three ``lookup`` child runs, sleeps before retrying the
flaky status page, and streams its summary. The check reads what happened from the event log
and the run rows, and the summary back through the output route.
"""

from __future__ import annotations

import uuid
from typing import Any

from awooop.core.events import run_stream_id
from awooop.demo import webhooks
from awooop.demo.stage import PROJECT, Stage, say

REPLY_TIMEOUT_S = {"replied": 60, "silent": 3}  # the silent one's timeout is part of the demo
RETRY_S = 2  # the status page's backoff (a durable sleep)
EDITED = {"question": "When did the dashboard go blank, and on which pages?"}
REPLY = {"text": "since 9:00, on every page"}

# --- SQL (observation only; the demo changes nothing behind the runtime's back) -------------
TRIAGE_ROW = """
SELECT status, waiting_for, result->>'summary' AS summary,
       result->'conversation'->>'outcome' AS outcome, result->'conversation'->>'asked' AS asked,
       (result->'status'->>'tries')::int AS tries
FROM awooop_run_state WHERE run_id = $1
"""
WAIT_EVENTS = """
SELECT event_type, coalesce(data->>'kind', '') AS kind FROM awooop_events
WHERE stream_id = $1
  AND event_type IN ('ApprovalGranted', 'SignalDelivered', 'TimerFired', 'ChildrenFinished')
ORDER BY version
"""
CHILD_RUNS = """
SELECT contract_id, status, count(*) AS n FROM awooop_run_state WHERE parent_run_id = $1
GROUP BY 1, 2
"""


class TriagePhase(Stage):
    async def triage_phase(self) -> None:
        say("phase 5 (beside phase 4): the triage agent, two tickets: one answered, one silent")
        runs: dict[str, uuid.UUID] = {}
        for name, timeout_s in REPLY_TIMEOUT_S.items():
            ticket = {
                "ticket": f"T-{name}",
                "customer": f"{name}@example.com",
                "text": "the dashboard is blank",
                "reply_timeout_s": timeout_s,
                "retry_s": RETRY_S,
            }
            delivered = await self.deliver(
                webhooks.api(self.tokens["api"], ticket, contract="triage")
            )
            if not delivered:
                return
            runs[name] = uuid.UUID(delivered[0])
        for name, run_id in runs.items():
            await self.wait_for(f"{name} ticket's approval request", self._row(run_id, "status"))
            body: dict[str, Any] = {"by": "demo-lead"}
            if name == "replied":
                body["payload"] = EDITED  # the reviewer edits the question
            await self.manage(run_id, "approve", body)
        await self.wait_for("the question to the customer", self._row(runs["replied"], "reply"))
        await self.manage(runs["replied"], "signals/reply", {"payload": REPLY, "key": "reply-1"})
        say(f"approved both questions; the customer of {runs['replied']} replied (a signal)")

        async def finished() -> bool:
            rows = [(await self.fetch(TRIAGE_ROW, r))[0] for r in runs.values()]
            return all(row["status"] in ("COMPLETED", "FAILED", "CANCELLED") for row in rows)

        await self.wait_for("the triage runs to finish", finished, limit_s=90)
        problems: list[str] = []
        for name, run_id in runs.items():
            problems += await self.check_triage(name, run_id)
        self.summary.triage_problems = problems
        for name, seen in self.summary.triage.items():
            say(f"  triage {name}: {seen}")
        for line in (await self.streamed(runs["replied"]) or "").splitlines():
            say(f"  streamed: {line}")  # what `awooop runs output` and the console show

    def _row(self, run_id: uuid.UUID, what: str) -> Any:
        async def check() -> bool:
            row = (await self.fetch(TRIAGE_ROW, run_id))[0]
            if what == "status":
                return bool(row["status"] == "WAITING_APPROVAL")
            return bool(row["waiting_for"] == "event reply")

        return check

    async def manage(self, run_id: uuid.UUID, action: str, body: dict[str, Any]) -> None:
        response = await self.http.post(
            f"/v1/projects/{PROJECT}/runs/{run_id}/{action}",
            json=body,
            headers=self.management_auth(),
        )
        if response.status_code not in (200, 201):
            self.summary.problems.append(f"{action}: HTTP {response.status_code} {response.text}")

    async def check_triage(self, name: str, run_id: uuid.UUID) -> list[str]:
        """What the run did, from its row, its events, its children and its output."""
        row = (await self.fetch(TRIAGE_ROW, run_id))[0]
        waits = await self.fetch(WAIT_EVENTS, run_stream_id(run_id))
        events = {(e["event_type"], e["kind"]) for e in waits}
        kids = await self.fetch(CHILD_RUNS, run_id)
        children = {(c["contract_id"], c["status"]): c["n"] for c in kids}
        streamed = await self.streamed(run_id)
        answered = name == "replied"
        expected = {
            "COMPLETED": row["status"] == "COMPLETED",
            "approved": ("ApprovalGranted", "") in events,
            "the edited question asked": not answered or row["asked"] == EDITED["question"],
            "a reply signal" if answered else "the reply's timeout": (
                ("SignalDelivered", "") in events
                if answered
                else ("TimerFired", "event") in events and row["outcome"] == "no reply"
            ),
            "three lookup child runs": children == {("lookup", "COMPLETED"): 3}
            and ("ChildrenFinished", "") in events,
            "a durable sleep": ("TimerFired", "sleep") in events and row["tries"] == 2,
            "the summary streamed": streamed is not None and streamed == row["summary"],
        }
        self.summary.triage[name] = (
            f"{row['status']}, {row['outcome']}, {sum(children.values())} child runs, "
            f"status page on try {row['tries']}, {len(streamed or '')} characters streamed"
        )
        return [f"triage {name}: not {what}" for what, ok in expected.items() if not ok]

    async def streamed(self, run_id: uuid.UUID) -> str | None:
        """The run's output as the output route gives it (its last attempt's chunks)."""
        response = await self.http.get(
            f"/v1/projects/{PROJECT}/runs/{run_id}/output",
            params={"format": "json"},
            headers=self.management_auth(),
        )
        if response.status_code != 200:
            self.summary.problems.append(f"output: HTTP {response.status_code} {response.text}")
            return None
        page = response.json()
        if not page["final"] or page["more"]:
            return None
        return "".join(c["text"] for c in page["chunks"] if not c["abandoned"])
