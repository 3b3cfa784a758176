"""What a handler sees: :class:`RunContext`, one per attempt (R-15).

A handler is ``async def handle(run: RunContext) -> object``; its return value (JSON-encodable)
becomes the run's result. ``run`` offers:

- ``await run.step(name, fn)``: journaled work. If a step of that name completed in an earlier
  attempt, its recorded result is returned and ``fn`` is not called again; otherwise ``fn()``
  runs and ``StepCompleted`` is written fenced (only while this attempt holds the lease). A
  step name is used once per run. Results are stored as JSON; the first attempt gets what a
  replay gets (``type=T``: a ``T``, else JSON builtins); a value JSON cannot hold, or larger
  than AWOOOP_STEP_RESULT_MAX_BYTES, is refused (:mod:`awooop.worker.step_values`); one
  Postgres cannot store (``\\u0000``, a lone surrogate) raises E-DATA-001 naming the step and
  the place, and nothing is recorded (other runs of the same group commit are not affected).
- ``await run.llm(prompt, contract=..., **options)``: the model gateway (revision pointer check
  before every call). Each call, answered or failed, is recorded as ``ModelCalled`` (fenced,
  before the answer is returned: :mod:`awooop.llm.calls`) with the model and the policy
  revision that served it, the prompt and the answer (capped) and the token counts, for
  people to read; the answer is not journaled (a retry calls again): use ``llm_step``.
- ``await run.llm_step(name, prompt, ...)``: a step whose work is one model call; its record
  and the step are one fenced write, and a later attempt gets the journaled ``LLMResult``
  without a call (:mod:`awooop.worker.model_steps`).
- while ``run.step`` (or ``run.wait_for_tool``) runs, the heartbeat reports that step and
  when it started (the run page shows it); an exception that leaves a step and fails the
  run names that step in ``RunFailed`` with its traceback.
- ``await run.wait_for_approval(name, reason=...)``: the first time, the run enters
  WAITING_APPROVAL (the lease is released, the attempt ends here; the token goes to the
  notifier). After an approval the run is dispatched again, the handler runs from the top,
  and this call returns the recorded approval.
- ``await run.wait_for_tool(tool, call)``: WAITING_TOOL while ``call()`` runs (the lease is
  kept and renewed; the run holds no slot of its concurrency key), the result is journaled
  like a step (name ``tool:<tool>``) once the run is admitted under its key again
  (:mod:`awooop.worker.tool_waits`; calls made in parallel are one wait of the run).
- ``await run.emit_output(text)``: streamed output (say each batch of a model's tokens),
  buffered and flushed in rows under the lease, read live by clients
  (:mod:`awooop.worker.output`); not journaled: an attempt that runs again emits again.
- ``await run.sleep(timedelta)`` / ``run.sleep_until(datetime)``, ``await
  run.wait_for_event(name, timeout=..., match=...)``: durable waits that end the attempt and
  hold no slot or lease (:mod:`awooop.worker.durable_waits`); ``await run.start_child(contract,
  input, key=...)``, ``await run.wait_for_children(handles)``: child runs (child_runs.py).
- ``run.run_id``, ``run.project_id``, ``run.input`` (the payload), ``run.attempt``,
  ``run.steps`` (results recorded so far), ``run.log``.

Cancellation is cooperative: a cancelled run, a lost lease or a shutdown cancels the handler
task (``asyncio.CancelledError`` at its next ``await``); ``run.check()`` raises E-RUN-002 when
the attempt no longer holds its lease, for handlers that compute without awaiting.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar, Unpack

from awooop.core.batching import data_error
from awooop.core.config import STEP_RESULT_MAX_BYTES, Settings
from awooop.core.db import Database
from awooop.core.errors import UnstorableValueError
from awooop.core.events import Event, StepCompleted
from awooop.core.logs import get_logger
from awooop.core.storable import encoded_problem, unstorable
from awooop.core.telemetry import child_span
from awooop.eventlog.state import RunState
from awooop.llm.admission import FlowGate
from awooop.llm.gateway import DEFAULT_CONTRACT, LLMResult
from awooop.runs import approval_options, approvals, leases
from awooop.runs.approvals import ApprovalTicket
from awooop.worker import approval_grants, approval_waits, contract_retry, policies

# Named here too, where the executor, the runtime and the test kit import them from:
from awooop.worker.approval_waits import APPROVAL_STEP_PREFIX as APPROVAL_STEP_PREFIX
from awooop.worker.approval_waits import Notifier as Notifier
from awooop.worker.approval_waits import Suspended as Suspended
from awooop.worker.attempt_writes import AttemptWrites
from awooop.worker.attempts import Attempt, InStep
from awooop.worker.child_runs import ChildRuns, ChildRunsMixin
from awooop.worker.durable_waits import DurableWaits
from awooop.worker.model_steps import LLMClient as LLMClient
from awooop.worker.model_steps import ModelCalls, StepAsked
from awooop.worker.output import OutputSink, checked
from awooop.worker.step_values import journal, kept, recorded, unkept
from awooop.worker.tool_waits import TOOL_STEP_PREFIX, SlotBell, ToolWaits

T = TypeVar("T")
log = get_logger("awooop.worker")


ApprovalGrant = approval_grants.ApprovalDecision  # what ``wait_for_approval`` returns


class RunContext(ChildRunsMixin):
    _tool_waits: type[ToolWaits] = ToolWaits  # the test kit's writes answers in memory

    def __init__(
        self,
        *,
        attempt: Attempt,
        state: RunState,
        db: Database,
        writer: Callable[[leases.FencedWrite], Awaitable[RunState | None]],
        llm: LLMClient | None,
        notifier: Notifier | None,
        approval_ttl_s: float,
        io_timeout_s: float | None = None,
        flow_max_wait_s: float = 3600.0,
        slots: SlotBell | None = None,
        step_result_max_bytes: int = STEP_RESULT_MAX_BYTES,
        overrides: contract_retry.ContractRetry | None = None,  # the run contract's policies
        output: OutputSink | None = None,  # where emit_output goes (awooop.worker.output)
        settings: Settings | None = None,  # child runs' intake and bound (child_runs.py)
    ) -> None:
        self._attempt = attempt
        self._output = output
        self._overrides = overrides or contract_retry.ContractRetry()
        self._result_max_bytes = step_result_max_bytes
        self._io_timeout_s = io_timeout_s
        self._db = db
        self._writer = writer
        self._llm = llm
        self._notifier = notifier
        self._approval_ttl_s = approval_ttl_s
        self._steps: dict[str, Any] = {
            name: entry.get("result") if isinstance(entry, dict) else entry
            for name, entry in state.saga_steps.items()
        }
        # What the attempt's parts call back into (not this context: no reference cycle).
        self._writes = AttemptWrites(attempt, writer)
        self.run_id = state.run_id
        self.project_id = state.project_id
        self.channel_type = state.channel_type
        self.provider_event_id = state.provider_event_id
        self.contract_id = state.contract_id
        self.input: Any = state.input
        self.attempt = attempt.number
        self.worker_id = attempt.worker_id
        flow = FlowGate(
            db,
            project_id=self.project_id,
            run_id=self.run_id,
            attempt=self.attempt,
            worker_id=self.worker_id,
            check=self._writes.check,
            max_wait_s=flow_max_wait_s,
            io_timeout_s=io_timeout_s,
        )
        self._model = ModelCalls(llm=llm, flow=flow, write=self._writes.journal,
                                 check=self._writes.check,
                                 project_id=self.project_id, worker_id=self.worker_id,
                                 attempt=self.attempt, also=self._overrides.also)  # fmt: skip
        self._state, self._slots, self._settings = state, slots, settings

    # Made on first use (most attempts wait for no tool or event, and log nothing of
    # their own): a run in flight holds only what it uses. The test kit sets its own.
    @functools.cached_property
    def log(self) -> Any:
        return log.bind(run_id=str(self.run_id), attempt=self.attempt)

    @functools.cached_property
    def _tools(self) -> ToolWaits:
        return self._tool_waits(db=self._db, state=self._state, worker_id=self.worker_id,
                                attempt=self.attempt, write=self._writes.write,
                                check=self._writes.check,
                                slots=self._slots, io_timeout_s=self._io_timeout_s)  # fmt: skip

    @functools.cached_property
    def _children(self) -> ChildRuns:  # type: ignore[override] # made on first use
        return ChildRuns(db=self._db, attempt=self._attempt, steps=self._state.saga_steps,
                         use=self._writes.use, io_timeout_s=self._io_timeout_s,
                         settings=self._settings)  # fmt: skip

    @functools.cached_property
    def _waits(self) -> DurableWaits:
        return DurableWaits(db=self._db, attempt=self._attempt, steps=self._state.saga_steps,
                            use=self._writes.use, io_timeout_s=self._io_timeout_s,
                            writer=self._writer)  # fmt: skip

    @property
    def steps(self) -> Mapping[str, Any]:
        return {name: unkept(value) for name, value in self._steps.items()}

    @property
    def cancelled(self) -> bool:
        return self._attempt.stop_reason is not None

    def check(self) -> None:
        """Raise E-RUN-002 if this attempt no longer holds a live lease."""
        self._writes.check()

    async def step(
        self,
        name: str,
        fn: Callable[[], Awaitable[T]],
        *,
        type: type[T] | None = None,
        **how: Unpack[policies.How],
    ) -> T:
        self._use(name)
        with child_span(
            f"step {name}",
            attributes={
                "awooop.run_id": str(self.run_id),
                "awooop.attempt": self.attempt,
                "awooop.step": name,
            },
        ) as span:
            if name in self._steps:
                span.set_attribute("awooop.step.replayed", True)
                return self._recorded(name, type)
            span.set_attribute("awooop.step.replayed", False)
            self.check()
            how = await self._overrides.step(name, how)
            with self._in_step(name) as started_at:
                result, tries = await policies.step_tries(fn, how, name, self.check)
                encoded, result = journal(f"step {name!r}", result, type, self._result_max_bytes)
                try:
                    await self._writes.journal(
                        lambda now: StepCompleted(
                            at=now,
                            worker_id=self.worker_id,
                            attempt=self.attempt,
                            step=name,
                            result=encoded,
                            started_at=started_at,
                            **tries.fields(),
                        )
                    )
                except Exception as exc:
                    if data_error(exc):
                        raise unstorable(f"step {name!r} result", exc) from exc
                    raise
            self._steps[name] = kept(encoded)
            return result

    async def llm(
        self, prompt: str, *, contract: tuple[str, str] = DEFAULT_CONTRACT, **options: Any
    ) -> LLMResult:
        """The model, through the revision pointer check (R-24) and flow control
        (:mod:`awooop.llm.admission`); the call is recorded (its budget reservation settled
        with the record) before its answer is returned or its error raised."""
        return await self._model.call(prompt, contract, options)

    async def llm_step(
        self,
        name: str,
        prompt: str,
        *,
        contract: tuple[str, str] = DEFAULT_CONTRACT,
        **options: Any,
    ) -> LLMResult:
        """A journaled step whose work is one model call (its tries): the answer and its
        record in one fenced write; replayed, the journaled answer (:mod:`.model_steps`)."""
        self._use(name)
        with child_span(f"step {name}", {"awooop.run_id": str(self.run_id),
                                         "awooop.step": name}) as span:  # fmt: skip
            span.set_attribute("awooop.step.replayed", name in self._steps)
            if name in self._steps:
                return self._recorded(name, LLMResult)
            self.check()
            options = await self._overrides.model_step(name, options)
            with self._in_step(name) as started_at:
                asked = StepAsked(name, started_at, self._result_max_bytes)
                result = await self._model.call(prompt, contract, options, asked)
        self._steps[name] = kept(asked.encoded)
        return result

    async def emit_output(self, text: str) -> None:
        """Append ``text`` to the run's streamed output (see :mod:`awooop.worker.output`)."""
        if self._output is None:
            raise RuntimeError("this worker has no output log")
        self.check()
        await self._output.emit(checked(text))

    async def wait_for_approval(
        self,
        name: str = "approval",
        *,
        reason: str = "",
        notify: Notifier | None = None,
        payload: Any = None,
        expires_in: timedelta | None = None,
        on_reject: approval_options.Policy = "fail",
        on_expire: approval_options.Policy = "fail",
    ) -> ApprovalGrant:
        approvals.check_name(name)
        ask = approval_grants.ask(payload, expires_in, on_reject, on_expire, self._result_max_bytes)
        step_name = APPROVAL_STEP_PREFIX + name
        self._use(step_name)
        if step_name in self._steps:
            return approval_grants.replayed(name, unkept(self._steps[step_name]))
        self.check()
        if self._output is not None:
            await self._output.flush()  # the request ends the lease: the output goes first
        outcome = await self._decide_or_ask(name, reason, ask)
        if isinstance(outcome, ApprovalGrant):
            self._steps[step_name] = approval_grants.recorded(outcome)
            return outcome
        await approval_waits.notify(self.log, name, outcome, notify or self._notifier)
        raise Suspended(name)

    async def _decide_or_ask(
        self, name: str, reason: str, ask: approval_grants.Ask
    ) -> ApprovalGrant | ApprovalTicket:
        return await approval_waits.decide_or_ask(
            self._db,
            self._attempt,
            self.log,
            name,
            reason,
            ask,
            ttl_s=self._approval_ttl_s,
            io_timeout_s=self._io_timeout_s,
        )

    async def wait_for_tool(
        self,
        tool: str,
        call: Callable[[], Awaitable[T]],
        *,
        type: type[T] | None = None,
        **how: Unpack[policies.How],
    ) -> T:
        step_name = TOOL_STEP_PREFIX + tool
        self._use(step_name)
        if step_name in self._steps:
            return self._recorded(step_name, type)
        self.check()
        how = await self._overrides.tool(tool, how)
        await self._tools.start(tool)  # the run is WAITING_TOOL: it holds no slot of its key
        try:
            with (
                child_span(
                    f"tool {tool}",
                    attributes={"awooop.run_id": str(self.run_id), "awooop.tool": tool},
                ),
                self._in_step(step_name) as started_at,
            ):
                result, tries = await policies.tool_tries(call, how, tool, self.check)
            encoded, result = journal(f"step {step_name!r}", result, type, self._result_max_bytes)
            refused = encoded_problem(encoded, "result")
            if refused is not None:
                raise unstorable(f"tool {tool!r} result", UnstorableValueError(refused))
        except BaseException:
            self._tools.gave_up()
            raise
        # Written once the run is re-admitted under its concurrency key (tool_waits.py).
        await self._tools.answered(tool, encoded, started_at, **tries.fields())
        self._steps[step_name] = kept(encoded)
        return result

    async def sleep(self, delay: timedelta, *, name: str | None = None) -> None:
        await self._waits.sleep(delay, None, name)

    async def sleep_until(self, when: datetime, *, name: str | None = None) -> None:
        await self._waits.sleep(None, when, name)

    async def wait_for_event(
        self,
        name: str,
        *,
        timeout: timedelta | None = None,  # noqa: ASYNC109 - the durable wait's, journaled
        match: Any = None,
        step: str | None = None,
    ) -> Any:
        return await self._waits.wait_for_event(name, timeout, match, step)

    # --- internals ---------------------------------------------------------------------------

    def _in_step(self, name: str) -> InStep:
        """The handler is in step ``name`` (the heartbeat reports it; an exception that leaves
        it names it as the failing step); ``as``: when the step started."""
        return InStep(self._attempt, name)

    def _use(self, name: str) -> None:
        self._writes.use(name)

    def _recorded(self, name: str, type_: type[T] | None) -> T:
        return recorded(f"step {name!r}", unkept(self._steps[name]), type_)

    async def _write(
        self, make: Callable[[RunState, datetime], Event | tuple[Event, ...]]
    ) -> RunState | None:
        return await self._writes.write(make)
