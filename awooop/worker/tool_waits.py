"""The tool waits of one attempt (``run.wait_for_tool``), kept per run, not per call.

A run waiting for its tool holds no concurrency slot (migration 0135): a slot is counted on
RUNNING runs with a live lease, and the attempt's lease is kept (renewed by the heartbeat)
while it is WAITING_TOOL. So:

- **start**: each call writes ``ToolWaitStarted`` (fenced). The first one takes the run from
  RUNNING to WAITING_TOOL: its slot is free from that commit on, and the worker is told
  (:class:`SlotBell`: its polling path looks for runs the key refused). A call started while
  the run already waits (parallel calls) joins the run's wait.
- **answer**: an answered call is held in memory while other calls of the attempt are still
  out (the attempt cannot go on without them: :func:`decide`). When the last one answered, one
  transaction locks the run's row under the attempt's fence, takes a slot of its key through
  ``awooop_concurrency_admit`` (:func:`awooop.runs.concurrency.readmit`) and, admitted, writes
  every held answer (``ToolResultReceived`` with ``others``, the last making the run RUNNING;
  then each ``StepCompleted`` ``tool:<name>``) and ends its recorded wait. The admission and
  the transition commit together, once per run's wait, however many calls it had.
- **refused**: nothing of the run changes: it stays WAITING_TOOL with its lease; the refusal
  is recorded in ``awooop_llm_waits`` (reason ``over_concurrency_limit``: ``blocked_on`` says
  the run's tool call answered and it waits for a slot of its key), and the attempt tries
  again when this worker frees a slot of a key (:class:`SlotBell`), or after a bounded backoff
  (:func:`retry_delay`: slots freed by other workers). Every answered call waits until its
  answer is written; the handler never goes on before its run holds a slot again.

A kill -9 at any point leaks no slot and never over-admits: a slot is only ever the lease of
a RUNNING run, so a holder killed after its re-admission frees it when its lease expires; a
worker killed before (waiting for its tool, or for a slot) held none, and its answers, never
written, are asked again by the next attempt (as a tool call cut by a crash is); a
transaction killed between the admission and its commit wrote nothing, and its key's
advisory lock ended with it. Admission and transition in one transaction, under the key's
lock and on a fresh count, is what keeps two attempts from taking one slot.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from awooop.core.db import Connection, Database
from awooop.core.events import Event, StepCompleted, ToolResultReceived, ToolWaitStarted
from awooop.core.retries import retry_transaction, unavailable_on_store_errors
from awooop.eventlog.state import RunState
from awooop.runs import concurrency, leases
from awooop.worker.attempts import trace_metadata
from awooop.worker.tasks import first_of

TOOL_STEP_PREFIX = "tool:"
RETRY_FIRST_S = 0.05  # the first retry of a refused re-admission
RETRY_MAX_S = 1.0  # and the longest backoff: a slot freed by another worker is seen this late
Maker = Callable[[Any, datetime], Event]  # a fenced write's event, from the state and the clock


class Next(enum.Enum):
    HOLD = "hold"  # other calls of the attempt are still out: wait for them
    CONTINUE = "continue"  # the last call answered: re-admit the run and write the answers


def decide(out: int, held: int) -> Next:
    """Pure: what an answered call does, given the calls still out and the answers held."""
    return Next.CONTINUE if out == 0 and held > 0 else Next.HOLD


def retry_delay(tries: int) -> float:
    """Pure: the wait before re-admission try ``tries + 1`` (doubling, bounded)."""
    return min(RETRY_MAX_S, RETRY_FIRST_S * 2.0 ** max(0, tries))


@dataclass
class Answer:
    tool: str
    result: Any  # as stored (msgspec.to_builtins)
    started_at: datetime
    written: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    tries: int = 1  # under its retry policy (awooop.worker.policies), and the failed ones' errors
    try_errors: tuple[str, ...] = ()


def answer_events(answers: list[Answer], worker_id: str, attempt: int) -> list[Maker]:
    """Pure: the events that write ``answers`` (held, in answer order), as fenced-write makers:
    each ``ToolResultReceived`` with the number written after it (the last makes the run
    RUNNING), then each journaled step."""

    def result(a: Answer, others: int) -> Maker:
        return lambda _s, now: ToolResultReceived(
            at=now,
            worker_id=worker_id,
            attempt=attempt,
            tool=a.tool,
            result=a.result,
            others=others,
        )

    def step(a: Answer) -> Maker:
        return lambda _s, now: StepCompleted(
            at=now,
            worker_id=worker_id,
            attempt=attempt,
            step=TOOL_STEP_PREFIX + a.tool,
            result=a.result,
            started_at=a.started_at,
            tries=a.tries,
            try_errors=a.try_errors,
        )

    last = len(answers) - 1
    return [result(a, last - i) for i, a in enumerate(answers)] + [step(a) for a in answers]


class SlotBell:
    """Rung when an attempt of this worker frees a slot of a concurrency key (it ended, or its
    run began to wait for a tool): the attempts waiting for re-admission here try again at
    once, and ``on_ring`` (the worker's polling path) looks for runs a full key refused."""

    def __init__(self) -> None:
        self._rung = asyncio.Event()
        self.on_ring: Callable[[], None] | None = None

    def ring(self) -> None:
        rung, self._rung = self._rung, asyncio.Event()
        rung.set()
        if self.on_ring is not None:
            self.on_ring()

    async def wait(self, timeout_s: float, also: asyncio.Event) -> None:
        """Until the next ring, ``also`` is set, or ``timeout_s``, whichever first."""
        await first_of(self._rung, also, timeout_s=timeout_s)


class ToolWaits:
    """The tool calls of one attempt (see the module doc)."""

    def __init__(
        self,
        *,
        db: Database,
        state: RunState,  # as the attempt began
        worker_id: str,
        attempt: int,
        write: Callable[[Maker], Awaitable[Any]],
        check: Callable[[], None],
        slots: SlotBell | None,
        io_timeout_s: float | None,
    ) -> None:
        self._db = db
        self._run_id = state.run_id
        self._project_id = state.project_id
        self._keyed = state.concurrency_key is not None
        self._worker_id = worker_id
        self._attempt = attempt
        self._write = write
        self._check = check
        self._slots = slots or SlotBell()
        self._io_timeout_s = io_timeout_s
        self._lock = asyncio.Lock()  # one change of the run's wait at a time
        self._out = 0  # calls started and not answered
        self._held: list[Answer] = []  # answered, not written yet
        self._changed_event: asyncio.Event | None = None  # made when the run first waits
        self._waiting = False  # a refusal is recorded (awooop_llm_waits)
        self.refusals = 0

    @property
    def _changed(self) -> asyncio.Event:
        """A call answered or gave up (made on first use: most attempts call no tool)."""
        if self._changed_event is None:
            self._changed_event = asyncio.Event()
        return self._changed_event

    async def start(self, tool: str) -> None:
        async with self._lock:
            self._check()
            leaves_running = self._out == 0 and not self._held
            await self._write(
                lambda _s, now: ToolWaitStarted(
                    at=now, worker_id=self._worker_id, attempt=self._attempt, tool=tool
                )
            )
            self._out += 1
        if leaves_running and self._keyed:
            self._slots.ring()  # its slot is free from the commit on

    def gave_up(self) -> None:
        """A call that raised (its answer is not written): one call fewer to wait for."""
        self._out -= 1
        self._changed.set()

    async def answered(
        self,
        tool: str,
        result: Any,
        started_at: datetime,
        tries: int = 1,
        try_errors: tuple[str, ...] = (),
    ) -> None:
        """Hold the answer (its ``tries``, and the failed ones' errors); return once it is
        written with the run RUNNING again (re-admitted under its key), or raise what stopped
        that (E-RUN-002: the lease is lost)."""
        answer = Answer(tool, result, started_at, tries=tries, try_errors=try_errors)
        self._out -= 1
        self._held.append(answer)
        self._changed.set()
        try:
            await self._drive(answer)
        except BaseException:
            if answer in self._held:  # cancelled, or the lease lost: the next answer drives
                self._held.remove(answer)
                self._changed.set()
            raise
        await answer.written

    async def _drive(self, answer: Answer) -> None:
        """The earliest held answer drives the run's return to RUNNING; the others wait."""
        tries = 0
        while not answer.written.done():
            if not self._held or self._held[0] is not answer:
                await asyncio.wait([answer.written], timeout=RETRY_MAX_S)
                continue
            async with self._lock:
                self._changed.clear()
                go = decide(self._out, len(self._held)) is Next.CONTINUE
                if go and await self._continue():
                    return
            if go:  # refused: a slot frees here, another call starts, or the backoff ends
                await self._slots.wait(retry_delay(tries), self._changed)
                tries += 1
            else:  # other calls are still out
                await self._slots.wait(RETRY_MAX_S, self._changed)
            self._check()

    async def _continue(self) -> bool:
        held = list(self._held)
        makers = answer_events(held, self._worker_id, self._attempt)
        detail = ", ".join(f"tool {a.tool}" for a in held) + " answered"

        async def readmit_and_write(conn: Connection) -> bool:
            state, admitted = await concurrency.readmit(
                conn, self._run_id, self._worker_id, self._attempt
            )
            if not admitted:
                until = datetime.now(UTC) + timedelta(seconds=RETRY_MAX_S)
                await concurrency.note_slot_wait(conn, state, self._attempt, detail, until)
                return False
            for make in makers:
                await leases.fenced_record(
                    conn, self._run_id, self._worker_id, self._attempt, make, trace_metadata()
                )
            if self._waiting:
                await concurrency.end_slot_wait(conn, self._run_id, self._attempt)
            return True

        try:
            with unavailable_on_store_errors("the tool result write failed"):
                # A deadlock (a reaper's claim holding the key's lock while it waits for this
                # row, in the instant the lease runs out) rolls back and is tried again.
                admitted = await retry_transaction(
                    lambda: self._db.in_tenant(
                        self._project_id, readmit_and_write, timeout_s=self._io_timeout_s
                    )
                )
        except Exception as exc:  # every held call gets the error (the lease is lost, ...)
            del self._held[: len(held)]
            for a in held:
                a.written.set_exception(exc)
            return True
        if not admitted:
            self._waiting = True
            self.refusals += 1
            return False
        del self._held[: len(held)]  # no call can answer meanwhile: none is out
        self._waiting = False
        for a in held:
            a.written.set_result(None)
        return True
