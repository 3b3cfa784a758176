"""A handler's model calls: ``run.llm`` and ``run.llm_step`` (:mod:`awooop.worker.context`).

Each try of a call goes through the gateway (its revision pointer check first, R-24, and flow
control: :mod:`awooop.llm.admission`) and is recorded as ``ModelCalled`` (fenced) before its
answer is returned or its error raised; a try that failed and may be tried again is recorded,
then the next one made after its backoff (:class:`~awooop.worker.policies.ModelTries`).

``run.llm_step(name, prompt, ...)`` is a journaled step whose work is one model call: the try
that answers writes its ``ModelCalled`` and the step's ``StepCompleted`` (the answer, an
``LLMResult`` as JSON) in ONE fenced write, the fence checked once (:class:`~awooop.runs.
leases.FencedWrite` with two events; with flow control, in the transaction that settles the
call's reservation). So:

- a crash or a lost lease before that write commits leaves neither event: the next attempt
  calls the model again (its call is new, recorded and charged as such);
- once it committed, a replay returns the journaled answer and calls nothing;
- an attempt that no longer holds its lease writes nothing (E-RUN-002).

An answer the journal refuses (over ``AWOOOP_STEP_RESULT_MAX_BYTES``, text Postgres cannot
store) is recorded as the call alone, and the step raises that error (nothing journaled).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from awooop.core.errors import AwoooPError, UnstorableValueError
from awooop.core.events import Event, ModelCalled, StepCompleted
from awooop.core.storable import encoded_problem, unstorable
from awooop.llm.admission import Admit, FlowGate
from awooop.llm.calls import called_event
from awooop.llm.gateway import LLMResult, ModelCall
from awooop.worker import policies
from awooop.worker.attempts import trace_metadata
from awooop.worker.step_values import journal

# AttemptWrites.journal: the events made at the write's clock, written fenced.
Write = Callable[[Callable[[datetime], Event | tuple[Event, ...]]], Awaitable[None]]


class LLMClient(Protocol):
    """What ``run.llm`` needs: ``awooop.llm.gateway.ModelGateway`` satisfies it (and takes
    ``also=``, the contracts the call confirms with its own: given only when the attempt's
    retry section came from the gateway's cache, :mod:`awooop.worker.contract_retry`)."""

    async def call(
        self,
        project_id: str,
        prompt: str,
        *,
        contract: tuple[str, str] = ...,
        options: Mapping[str, Any] | None = ...,
        admit: Admit | None = ...,
    ) -> ModelCall: ...


@dataclass
class StepAsked:
    """The step a call answers (``run.llm_step``): its name, when it started, and once
    journaled, its result as recorded."""

    name: str
    started_at: datetime
    max_bytes: int
    encoded: Any = None


class ModelCalls:
    """The model calls of one attempt."""

    def __init__(
        self,
        *,
        llm: LLMClient | None,
        flow: FlowGate,
        write: Write,
        check: Callable[[], None],
        project_id: str,
        worker_id: str,
        attempt: int,
        also: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self._llm = llm
        self._flow = flow
        self._write = write
        self._check = check
        self._project_id = project_id
        self._worker_id = worker_id
        self._attempt = attempt
        self._also = also

    async def call(
        self,
        prompt: str,
        contract: tuple[str, str],
        options: dict[str, Any],
        step: StepAsked | None = None,
    ) -> LLMResult:
        """One try (and the next ones its policy allows); ``step``: the step it answers."""
        if self._llm is None:
            raise RuntimeError("this worker has no model gateway")
        self._check()
        tries = policies.ModelTries.of(options)  # retry=, timeout= (awooop.worker.policies)
        seq = self._flow.next_call()
        work = self._llm.call(
            self._project_id,
            prompt,
            contract=contract,
            options=options,
            admit=self._flow.admitter(seq),
            **({"also": self._also} if self._also else {}),  # not a local: held by no frame
        )
        call = tries.mark(await tries.timed(work, contract, prompt))
        answered, refused = self._answered(step, call)
        try:
            await self._record(call, seq, answered)
        except Exception as exc:
            # Not recorded (the lease is lost, or Postgres is away): the handler gets that
            # error, never an answer without its record. A model error stays its cause.
            if call.error is not None and exc.__cause__ is None:
                raise exc from call.error
            raise
        if refused is not None:
            raise refused

        async def again(prompt: str, *, contract: tuple[str, str], **options: Any) -> LLMResult:
            return await self.call(prompt, contract, options, step)

        return await tries.after(call, again, prompt, contract, options)

    def _answered(
        self, step: StepAsked | None, call: ModelCall
    ) -> tuple[Callable[[datetime], StepCompleted] | None, AwoooPError | None]:
        """The ``StepCompleted`` to write with an answered call of ``step`` (None: none), or
        the error that refuses its answer (the call is then recorded alone)."""
        if step is None or call.result is None:
            return None, None
        try:
            encoded, _ = journal(f"step {step.name!r}", call.result, LLMResult, step.max_bytes)
        except AwoooPError as exc:
            return None, exc
        problem = encoded_problem(encoded, "result")
        if problem is not None:
            return None, unstorable(f"step {step.name!r} result", UnstorableValueError(problem))
        step.encoded = encoded
        worker_id, attempt, name, started_at = (
            self._worker_id,
            self._attempt,
            step.name,
            step.started_at,
        )
        return (
            lambda now: StepCompleted(
                at=now,
                worker_id=worker_id,
                attempt=attempt,
                step=name,
                result=encoded,
                started_at=started_at,
            )
        ), None

    async def _record(
        self, call: ModelCall, seq: int, answered: Callable[[datetime], StepCompleted] | None
    ) -> None:
        """``call``'s ModelCalled, with the step it answers when there is one: one write."""
        ticket = self._flow.ticket(seq)
        if ticket is not None:
            self._check()
            await self._flow.record(ticket, call, trace_metadata(), then=answered)
            return
        worker_id, attempt = self._worker_id, self._attempt

        def events(now: datetime) -> ModelCalled | tuple[Event, ...]:
            called = called_event(call, worker_id=worker_id, attempt=attempt, at=now)
            return called if answered is None else (called, answered(now))

        await self._write(events)
