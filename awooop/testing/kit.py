""":class:`HandlerKit`: a handler run in-process, without Postgres or Redis, through the real
run context and state machine (see :mod:`awooop.testing`)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import msgspec

from awooop.core.config import (
    SIGNAL_PAYLOAD_MAX_BYTES,
    SIGNALS_PER_RUN_MAX,
    STEP_RESULT_MAX_BYTES,
    Settings,
)
from awooop.core.errors import LeaseLostError, UnstorableValueError
from awooop.core.events import (
    Event,
    ModelCalled,
    RunClaimed,
    RunCompleted,
    RunCreated,
    RunFailed,
    WaitStarted,
)
from awooop.core.storable import encoded_problem, unstorable
from awooop.eventlog.state import RunState, RunStatus, apply, fold
from awooop.runs import leases
from awooop.runs.approvals import ApprovalTicket, DecisionRecord
from awooop.runs.signals import Sent
from awooop.testing import ending
from awooop.testing.approvals import Approvals, Approve, Reject, requested
from awooop.testing.children import KitChildren
from awooop.testing.context import KitAttempt, KitContext
from awooop.testing.fakes import Clock, FakeModel, FakeTools
from awooop.testing.journal import LEASED, Journal, reopening
from awooop.testing.output import MAX_BYTES, KitOutput
from awooop.testing.results import KitResult, ReplayReport
from awooop.testing.waits import Signals, open_wait, timer_due
from awooop.worker import approval_grants
from awooop.worker.context import RunContext, Suspended
from awooop.worker.contract_retry import Overrides
from awooop.worker.handler_version import version_of

Handler = Callable[[RunContext], Awaitable[object]]
MAX_ATTEMPTS_PER_CALL = 50  # a handler the kit would take again forever stops here


@dataclass
class _Run:
    children: KitChildren[HandlerKit]
    events: list[Event] = field(default_factory=list)
    approvals: Approvals = field(default_factory=Approvals)
    signals: Signals = field(default_factory=Signals)
    asked: list[tuple[str, bool]] = field(default_factory=list)
    error: BaseException | None = None
    output: KitOutput = field(default_factory=KitOutput)


class HandlerKit:
    """Runs ``handler`` in-process: ``result = await HandlerKit(handle).run({"text": "hi"})``.

    Each attempt gets the real :class:`RunContext` whose writes go to an in-memory journal
    folded by the real state machine, with fakes for the model, the tools and the clock; an
    attempt ends as the worker ends it. ``approvals``: scripted decisions by name (else the run
    waits for :meth:`approve`/:meth:`reject` and :meth:`resume`); ``contract_retry``: the
    agent contract's ``retry`` section (refused with E-REVISION-006 if malformed). The
    handbook: docs/workers.md, Testing handlers. Child runs: :mod:`awooop.testing.children`
    (``children``: handlers by contract; ``start_children``: drive each child as it starts)."""

    def __init__(
        self,
        handler: Handler,
        *,
        model: FakeModel | None = None,
        tools: FakeTools | None = None,
        approvals: Mapping[str, Approve | Reject] | None = None,
        clock: Clock | None = None,
        project_id: str = "test-project",
        approval_ttl_s: float = 86400.0,
        lease_ttl_s: float = 30.0,
        max_attempts: int = 3,
        step_result_max_bytes: int = STEP_RESULT_MAX_BYTES,
        worker_id: str = "kit-worker",
        contract_retry: Mapping[str, Any] | None = None,
        output_max_bytes: int = MAX_BYTES,
        signal_payload_max_bytes: int = SIGNAL_PAYLOAD_MAX_BYTES,
        signals_per_run_max: int = SIGNALS_PER_RUN_MAX,
        children: Mapping[str, Handler] | None = None,
        start_children: bool = True,
        children_pending_max: int | None = None,
    ) -> None:
        self.handler = handler
        self.child_handlers: dict[str, Handler] = dict(children or {})
        self.start_children = start_children
        self.children_pending_max = children_pending_max or Settings().children_pending_max
        self.clock = clock or Clock()
        self.model = model or FakeModel()
        self.model.clock = self.clock
        self.tools = tools or FakeTools()
        self.approvals: dict[str, Approve | Reject] = dict(approvals or {})
        self.project_id = project_id
        self.approval_ttl_s = approval_ttl_s
        self.lease_ttl_s = lease_ttl_s
        self.max_attempts = max_attempts
        self.step_result_max_bytes = step_result_max_bytes
        self.worker_id = worker_id
        self.contract_retry = Overrides.of(contract_retry)
        self.output_max_bytes = output_max_bytes
        self.limits = {
            "payload_max_bytes": signal_payload_max_bytes,
            "kept_max": signals_per_run_max,
        }
        self._run = self._new_run()

    # --- the test's side ---------------------------------------------------------------------

    @property
    def journal(self) -> Journal:
        return Journal(self._run.events)

    @property
    def state(self) -> RunState:
        return self.journal.state

    @property
    def output(self) -> KitOutput:
        """What the run emitted with ``run.emit_output`` (by attempt)."""
        return self._run.output

    @property
    def signals(self) -> Signals:
        return self._run.signals

    @property
    def children(self) -> KitChildren[HandlerKit]:
        """The run's child runs by key, each a kit of its own (:mod:`awooop.testing.children`)."""
        return self._run.children

    async def run(
        self, input: Any = None, *, run_id: uuid.UUID | None = None, contract_id: str | None = None
    ) -> KitResult:
        """A new run of ``input`` (JSON; None: ``{}``, as a run always has one), driven until
        it completes, fails or waits for an approval without a scripted decision."""
        run_id = run_id or uuid.uuid4()
        self.begin(
            RunCreated(
                at=self.clock.now(),
                run_id=run_id,
                project_id=self.project_id,
                channel_type="api",
                provider_event_id=str(run_id),
                input={} if input is None else msgspec.to_builtins(input),
                max_attempts=self.max_attempts,
                contract_id=contract_id,
            )
        )
        return await self._drive(self.handler)

    async def resume(self, handler: Handler | None = None) -> KitResult:
        """Go on after :meth:`approve` (the next attempt runs the handler from the top)."""
        return await self._drive(handler or self.handler)

    def approve(
        self,
        name: str = "approval",
        *,
        actor: str = "test",
        by: str | None = None,
        reason: str = "",
        payload: Any = None,
    ) -> None:
        """Grant the approval the run waits for, as ``awooop runs approve`` does (``payload``:
        the draft as the reviewer edited it)."""
        self._decide(name, Approve(actor=actor, by=by, reason=reason, payload=payload))

    def reject(
        self,
        name: str = "approval",
        *,
        actor: str = "test",
        reason: str = "",
        by: str | None = None,
        payload: Any = None,
    ) -> None:
        """Reject it, as ``awooop runs reject`` does: the run FAILS with E-APPROVAL-004, or
        resumes when the request said ``on_reject="return"``."""
        self._decide(name, Reject(actor=actor, reason=reason, by=by, payload=payload))

    def advance(self, by: float | timedelta) -> None:
        """Move the clock ``by`` seconds (or a timedelta); an approval whose time ran out
        expires, as the approval-expiry loop does (the run FAILS with E-APPROVAL-002, or
        resumes with ``on_expire="return"``), and a wait whose due time came ends, as the
        timers loop ends it (``TimerFired``: RESUMED; then :meth:`resume`)."""
        seconds = by.total_seconds() if isinstance(by, timedelta) else by
        self.due(self.clock.advance(seconds))

    def signal(
        self, name: str, payload: Any = None, *, key: str | None = None, sent_by: str = "test"
    ) -> Sent:
        """Send the run a signal, as ``awooop runs signal`` does (``key``: its idempotency key,
        a fresh one by default): delivered to a wait for ``name`` whose ``match`` it contains
        (``SignalDelivered``: RESUMED; then :meth:`resume`), else kept for a later wait."""
        journal, now = self.journal, self.clock.now()
        key = uuid.uuid4().hex if key is None else key
        sent, delivered = self._run.signals.send(
            journal, name, payload, key, sent_by, now, **self.limits
        )
        if delivered is not None:
            self._append(delivered)
        return sent

    async def replay(self, journal: Journal, handler: Handler | None = None) -> ReplayReport:
        """Run ``handler`` (new code) on a recorded journal, as a worker of a new release takes
        a run in flight: a finished attempt's last event is set aside, the run is requeued (or,
        when an approval ended it, retried by an operator) and the next attempt runs the new
        code, replaying what the journal holds."""
        events = [e for e in journal if not isinstance(e, RunCompleted | RunFailed)]
        self._run = self._new_run(list(events))
        recorded = {e.step for e in Journal(events).step_events}
        recorded |= {e.step for e in Journal(events).of_type(WaitStarted)}
        reopened = reopening(self.state, self.clock.now())
        if reopened is not None:
            self._append(reopened)
        before = len(self._run.events)
        result = await self._drive(handler or self.handler)
        asked = [name for name, _ in self._run.asked]
        return ReplayReport(
            result=result,
            replayed=[name for name, replayed in self._run.asked if replayed],
            ran=[name for name, replayed in self._run.asked if not replayed],
            unused=sorted(recorded - set(asked)),
            model_calls=[e for e in self._run.events[before:] if isinstance(e, ModelCalled)],
        )

    # --- the context's side ------------------------------------------------------------------

    def begin(self, created: RunCreated) -> None:
        """A new run of this kit, as ``created`` makes it (PENDING)."""
        self._run = self._new_run()
        self._append(created)

    def now(self) -> datetime:
        return self.clock.now()

    def due(self, now: datetime) -> None:
        """What the expiry and timers loops end at ``now``, here and in the child runs."""
        expiry = self._run.approvals.expired(now)
        fired = timer_due(open_wait(self.journal), now)
        for event in (expiry, fired):
            if event is not None:
                self._append(event)
        self._run.children.due(now)

    async def write(self, write: leases.FencedWrite) -> RunState:
        """A fenced write (one event or several, all or none): refused as Postgres refuses it
        (the fence, unstorable text)."""
        now = self.clock.now()
        state = self.state
        if state.status in LEASED and state.attempt_count == write.attempt:
            state = msgspec.structs.replace(state, lease_until=now + timedelta(seconds=60))
        problem = leases.fence_problem(state, now, write.worker_id, write.attempt)
        if problem is not None:
            raise LeaseLostError(f"write refused: {problem}", run_id=state.run_id)
        made = write.make_event(state, now)
        events = made if isinstance(made, tuple) else (made,)
        for event in events:
            refused = encoded_problem(event, type(event).__name__)
            if refused is not None:
                raise UnstorableValueError(refused, run_id=state.run_id)
        for event in events:
            self._append(event)
        return self.state

    def asked(self, step: str, replayed: bool) -> None:
        self._run.asked.append((step, replayed))

    def decision(self, name: str) -> DecisionRecord | None:
        return self._run.approvals.decisions.get(name)

    async def request_approval(
        self, ctx: KitContext, name: str, reason: str, ask: approval_grants.Ask
    ) -> ApprovalTicket:
        """What :func:`awooop.runs.approvals.request` writes, and its ticket."""
        made = requested(ctx.worker_id, ctx.attempt, reason, ask, self.approval_ttl_s)
        state = await self.write(leases.FencedWrite(ctx.run_id, ctx.worker_id, ctx.attempt, made))
        return self._run.approvals.opened(
            state.run_id, state.project_id, name, self._run.events[-1]
        )

    # --- internals ---------------------------------------------------------------------------

    def _new_run(self, events: list[Event] | None = None) -> _Run:
        return _Run(KitChildren(self), events=events or [], output=KitOutput(self.output_max_bytes))

    def _append(self, event: Event) -> None:
        events = self._run.events
        apply(fold(events), event)  # refused as the real state machine refuses it
        events.append(event)

    def _decide(self, name: str, decision: Approve | Reject) -> None:
        run_id = self.state.run_id
        self._append(self._run.approvals.decide(name, decision, self.clock.now(), run_id))

    async def _drive(self, handler: Handler) -> KitResult:
        for _ in range(MAX_ATTEMPTS_PER_CALL):
            status = self.state.status
            if status in (RunStatus.PENDING, RunStatus.RESUMED):
                await self._attempt(handler)
            elif status is RunStatus.WAITING_EVENT and (
                finished := self._run.children.finished(open_wait(self.journal), self.now())
            ):
                self._append(finished)
            elif status is RunStatus.WAITING_APPROVAL and self._run.approvals.ticket:
                name = self._run.approvals.ticket.name
                decision = self.approvals.get(name)
                if decision is None:
                    break
                self._decide(name, decision)
            else:
                break
        else:
            raise RuntimeError(f"the run took more than {MAX_ATTEMPTS_PER_CALL} attempts")
        return KitResult(
            self.journal, self._run.error, self._run.approvals.ticket, self._run.output
        )

    async def _attempt(self, handler: Handler) -> None:
        number = self.state.attempt_count + 1
        now = self.clock.now()
        lease_until = now + timedelta(seconds=self.lease_ttl_s)
        self._append(
            RunClaimed(
                at=now,
                worker_id=self.worker_id,
                attempt=number,
                lease_until=lease_until,
                handler_version=version_of(handler),  # as a worker of that code records it
            )
        )
        state = self.state
        attempt = KitAttempt(
            run_id=state.run_id,
            project_id=state.project_id,
            worker_id=self.worker_id,
            number=number,
            lease_deadline=time.monotonic() + 10.0**9,  # renewed by no heartbeat: never lost
            now=self.clock.now,
        )
        self._run.error = None
        try:
            value = await handler(KitContext(self, attempt, state))
        except Suspended:
            return
        except Exception as exc:
            self._failed(attempt, exc)
            return
        attempt.finishing = True
        try:
            encoded = msgspec.to_builtins(value)
        except (TypeError, ValueError) as exc:
            self._failed(attempt, exc)
            return
        refused = encoded_problem(encoded, "result")
        if refused is not None:
            self._failed(attempt, unstorable("the return value", UnstorableValueError(refused)))
            return
        self._append(
            RunCompleted(
                at=self.clock.now(), worker_id=self.worker_id, attempt=number, result=encoded
            )
        )

    def _failed(self, attempt: KitAttempt, exc: Exception) -> None:
        """The last write of an attempt that raised, as the worker writes it."""
        event = ending.failed(self.worker_id, attempt, exc, self.clock.now())
        self._run.error = exc if isinstance(event, RunFailed) else None
        self._append(event)
