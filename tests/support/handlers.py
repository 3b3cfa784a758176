"""Run handlers for tests, driven by the run's input; side effects are counted.

Every side effect is appended to ``EFFECTS`` (in-process tests) and, when the environment
variable ``AWOOOP_TEST_SIDE_EFFECTS`` names a file, written there as one JSON line with the
process id (subprocess tests; ``O_APPEND`` writes of one short line do not interleave).

Input keys of :func:`journaled`: ``hang_on_attempts`` (list: attempts that hang after step
one, until killed or cancelled), ``sleep`` (seconds before step two), ``approval`` (wait for
approval ``go`` between the steps), ``fail`` (raise after step two), ``tool`` (wait for a tool
call between the steps), ``same_step_twice`` (use one step name twice), ``block_on_attempts``
and ``block_s`` (attempts that block the event loop for ``block_s`` seconds after step one and
then return at once: a stalled worker), ``unavailable_on_attempts`` (attempts that raise
``DatabaseUnavailableError`` after step one, as a journal write does while Postgres restarts).

:func:`exits` is a poison handler: it kills its worker process (``os._exit(1)``) every time;
:func:`exits_when_told` kills it only for runs whose input says ``exit`` (after ``after_s``
seconds, so that the worker holds other runs by then) and sleeps ``sleep`` seconds for others.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from typing import Any

import msgspec

from awooop.core.errors import (
    DatabaseUnavailableError,
    FlowWaitTooLongError,
    OverBudgetError,
    PriceNotFoundError,
)
from awooop.runs.approvals import ApprovalTicket
from awooop.worker.context import RunContext

SIDE_EFFECTS_ENV = "AWOOOP_TEST_SIDE_EFFECTS"
EFFECTS: list[dict[str, Any]] = []
TICKETS: list[ApprovalTicket] = []


def effect(run: RunContext, what: str) -> dict[str, Any]:
    line = {
        "run_id": str(run.run_id),
        "what": what,
        "attempt": run.attempt,
        "worker_id": run.worker_id,
        "pid": os.getpid(),
        "t": time.time(),
    }
    EFFECTS.append(line)
    path = os.environ.get(SIDE_EFFECTS_ENV)
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, msgspec.json.encode(line) + b"\n")
        finally:
            os.close(fd)
    return line


def effects_of(run_id: object, what: str | None = None) -> list[dict[str, Any]]:
    """The side effects this process's handlers recorded for ``run_id`` (of kind ``what``)."""
    return [
        e for e in EFFECTS if e["run_id"] == str(run_id) and (what is None or e["what"] == what)
    ]


def read_effects(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path, "rb") as f:
        return [msgspec.json.decode(line) for line in f if line.strip()]


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    """Pure: the most intervals open at one moment (an end before a begin at the same time)."""
    points = sorted([(b, 1) for b, _ in intervals] + [(e, -1) for _, e in intervals])
    most = current = 0
    for _, step in points:
        current += step
        most = max(most, current)
    return most


def executions(
    effects: list[dict[str, Any]], runs: set[str], killed_at: dict[int, float], end: float
) -> list[tuple[float, float]]:
    """Pure: the stretches the key's attempts executed, from their begin/end records; a stretch
    cut by a SIGKILL ends at the kill."""
    opened: dict[tuple[str, int, int], float] = {}
    out: list[tuple[float, float]] = []
    for e in sorted(effects, key=lambda e: e["t"]):
        if e["run_id"] not in runs:
            continue
        who = (e["run_id"], e["attempt"], e["pid"])
        if e["what"] == "begin":
            opened[who] = e["t"]
        elif e["what"] == "end" and who in opened:
            out.append((opened.pop(who), e["t"]))
    for (_, _, pid), began in opened.items():
        out.append((began, killed_at.get(pid, end)))
    return out


async def remember_ticket(ticket: ApprovalTicket) -> None:
    TICKETS.append(ticket)
    path = os.environ.get(SIDE_EFFECTS_ENV)
    if path:
        with open(path + ".tickets", "ab") as out:  # noqa: ASYNC230 - test helper, tiny write
            out.write(msgspec.json.encode(ticket) + b"\n")


async def journaled(run: RunContext) -> dict[str, Any]:
    options: dict[str, Any] = run.input if isinstance(run.input, dict) else {}

    async def one() -> int:
        effect(run, "one")
        return 41

    first = await run.step("one", one)
    if options.get("same_step_twice"):
        await run.step("one", one)
    if options.get("approval"):
        await run.wait_for_approval("go", reason="test approval", notify=remember_ticket)
    if options.get("tool"):

        async def call_tool() -> dict[str, int]:
            effect(run, "tool")
            await asyncio.sleep(float(options.get("tool_s", 0.0)))
            return {"found": 3}

        await run.wait_for_tool("search", call_tool)
    if run.attempt in options.get("block_on_attempts", []):
        # A stall: the event loop is blocked, so no heartbeat runs; then the handler returns
        # straight away and the executor tries to write the completion.
        effect(run, "block")
        time.sleep(float(options.get("block_s", 3.0)))  # noqa: ASYNC251 - the stall itself
        effect(run, "unblocked")
        return {"blocked": True}
    if run.attempt in options.get("unavailable_on_attempts", []):
        # What a journal write or a pointer check raises while Postgres restarts.
        effect(run, "unavailable")
        raise DatabaseUnavailableError("connection lost (simulated restart)")
    if run.attempt in options.get("hang_on_attempts", []):
        effect(run, "hang")
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            effect(run, "cancelled")
            raise
    if options.get("sleep"):
        try:
            await asyncio.sleep(float(options["sleep"]))
        except asyncio.CancelledError:
            effect(run, "cancelled")
            raise

    async def two() -> int:
        effect(run, "two")
        return first + 1

    second = await run.step("two", two)
    if options.get("fail"):
        raise ValueError("asked to fail")
    effect(run, "done")
    return {"one": first, "two": second}


async def exclusive(run: RunContext) -> dict[str, Any]:
    """Records when it starts and ends, to show that no two executions of a run overlap."""
    begin = effect(run, "begin")
    await asyncio.sleep(float(run.input.get("sleep", 0.0)) if isinstance(run.input, dict) else 0)
    end = effect(run, "end")
    return {"pid": os.getpid(), "seconds": end["t"] - begin["t"]}


async def ticking(run: RunContext) -> dict[str, Any]:
    """A side effect ("tick") every ``tick_every_s`` (0.02) for ``tick_s`` seconds: the latest
    tick of an attempt shows when its handler really stopped. With ``stubborn``, a first
    cancellation is swallowed for ``stubborn`` seconds (a handler slow to stop)."""
    options: dict[str, Any] = run.input if isinstance(run.input, dict) else {}
    every = float(options.get("tick_every_s", 0.02))
    until = time.monotonic() + float(options.get("tick_s", 1.0))
    effect(run, "begin")
    try:
        while time.monotonic() < until:
            effect(run, "tick")
            await asyncio.sleep(every)
    except asyncio.CancelledError:
        stubborn = float(options.get("stubborn", 0.0))
        if stubborn:
            effect(run, "ignoring_cancel")
            stop_at = time.monotonic() + stubborn
            while time.monotonic() < stop_at:
                effect(run, "tick")
                await asyncio.sleep(every)
        effect(run, "cancelled")
        raise
    effect(run, "end")
    return {"ticks": True}


async def exits_when_told(run: RunContext) -> dict[str, bool]:
    """A poison run among innocent ones: ``{"exit": true, "after_s": S}`` kills the worker
    process S seconds into every attempt (``exit`` effect first); any other input records
    ``start``, sleeps ``sleep`` seconds, records ``done`` and returns."""
    data = run.input if isinstance(run.input, dict) else {}
    if data.get("exit"):
        await asyncio.sleep(float(data.get("after_s", 0)))
        effect(run, "exit")
        os._exit(1)
    effect(run, "start")
    await asyncio.sleep(float(data.get("sleep", 0)))
    effect(run, "done")
    return {"ok": True}


async def exits(run: RunContext) -> None:
    """Kill the worker process, whatever the run: no exception, no event, no release; the
    lease simply stops being renewed (a handler that segfaults or runs out of memory)."""
    effect(run, "exit")
    os._exit(1)


TOOL_GATES: dict[str, asyncio.Event] = {}  # in-process tests: a tool answers when its gate is set


async def keyed(run: RunContext) -> dict[str, Any]:
    """For concurrency keys: records "begin" and "end" around each stretch that holds a slot
    ("end" also when the attempt is cancelled; a SIGKILL leaves a "begin" alone). ``sleep``
    seconds of work; ``tool``: a tool call of ``sleep`` seconds in the middle, or ``tools``:
    the names of tool calls made in parallel there (each recorded "answered:<name>"), which
    answer when the test sets ``TOOL_GATES[gate]`` given ``gate``; a tool wait holds no slot:
    "end" before it, "begin" once the handler goes on (its run re-admitted under its key);
    ``approval``: waits for approval ``go`` in the middle (the attempt ends, its slot with it;
    after the approval the handler runs again from the top)."""
    options: dict[str, Any] = run.input if isinstance(run.input, dict) else {}
    sleep = float(options.get("sleep", 0.2))
    tools = [str(t) for t in options.get("tools") or (["search"] if options.get("tool") else [])]
    effect(run, "begin")
    try:
        await asyncio.sleep(sleep)
        if tools:

            async def call_tool(name: str) -> dict[str, str]:
                gate = options.get("gate")
                if gate is not None:
                    await TOOL_GATES.setdefault(str(gate), asyncio.Event()).wait()
                else:
                    await asyncio.sleep(sleep)
                effect(run, f"answered:{name}")
                return {"tool": name}

            effect(run, "end")
            await asyncio.gather(
                *(run.wait_for_tool(n, functools.partial(call_tool, n)) for n in tools)
            )
            effect(run, "begin")
        if options.get("approval"):
            effect(run, "end")
            await run.wait_for_approval("go", reason="keyed", notify=remember_ticket)
            effect(run, "begin")
            await asyncio.sleep(sleep)
    finally:
        effect(run, "end")
    return {"pid": os.getpid()}


async def model_calls(run: RunContext) -> dict[str, Any]:
    """Model calls under flow control: ``calls`` (1) calls of ``prompt`` ("a b c": the local
    model counts 3 input and 2 output tokens) with ``max_tokens`` (5) as the reservation, each
    wrapped in a step when ``journal``; ``approval`` waits for approval ``go`` after them (a
    second attempt then replays the steps). An ``llm`` side effect per answered call; a call
    refused by a budget or a wait bound ends the run with ``refused`` (its code)."""
    options: dict[str, Any] = run.input if isinstance(run.input, dict) else {}
    prompt = str(options.get("prompt", "a b c"))
    answers: list[str] = []
    for i in range(int(options.get("calls", 1))):

        async def ask(i: int = i) -> str:
            result = await run.llm(prompt, max_tokens=int(options.get("max_tokens", 5)))
            effect(run, f"llm:{i}")
            return result.text

        try:
            answers.append(
                await run.step(f"ask:{i}", ask) if options.get("journal") else await ask()
            )
        except (OverBudgetError, FlowWaitTooLongError, PriceNotFoundError) as exc:
            effect(run, f"refused:{exc.code}")
            return {"refused": exc.code, "answers": answers}
    if options.get("approval"):
        await run.wait_for_approval("go", reason="flow test", notify=remember_ticket)
    return {"answers": answers}


async def _named(run: RunContext, name: str) -> dict[str, Any]:
    """A handler that records its own name with each execution ("handler:<name>" at the start,
    "done:<name>" at the end), sleeping ``sleep`` seconds between: which handler ran each run;
    given ``hold`` (a path), it also waits until that file exists."""
    options: dict[str, Any] = run.input if isinstance(run.input, dict) else {}
    effect(run, f"handler:{name}")
    await asyncio.sleep(float(options.get("sleep", 0.0)))
    hold = options.get("hold")
    for _ in range(6000 if hold else 0):  # five minutes at the most
        if await asyncio.to_thread(os.path.exists, str(hold)):
            break
        await asyncio.sleep(0.05)
    effect(run, f"done:{name}")
    return {"handler": name}


async def handler_one(run: RunContext) -> dict[str, Any]:
    """Routing tests: the handler of contract ``c1`` (``awooop worker --contract c1``)."""
    return await _named(run, "one")


async def handler_two(run: RunContext) -> dict[str, Any]:
    """Routing tests: the handler of contract ``c2``."""
    return await _named(run, "two")
