"""The record of a run's model calls: every ``run.llm`` call becomes a ``ModelCalled`` event.

``run.llm`` (:mod:`awooop.worker.context`) asks the gateway for a :class:`ModelCall`
(:meth:`ModelGateway.call <awooop.llm.gateway.ModelGateway.call>`), writes
:func:`called_event` of it on the run's stream through the fenced write path of
``StepCompleted``, then hands the answer to the handler (or raises the call's error). The
console's run page and ``awooop runs show`` list the calls (:mod:`awooop.projections.model_calls`).

Why an event on the run's stream and not a side table written by the worker:

- **Who may write is already decided there.** A fenced write is refused (E-RUN-002) unless
  the row names this worker and attempt under a live lease, in the same transaction as the
  event. An attempt that lost its lease can therefore not add a call to a run another attempt
  now owns; a side table would need a second fence kept equal to this one.
- **The log is the truth, and everything that reads it gets the calls for free**: the run
  page and ``runs show`` already read the run's stream for the timeline (one read serves
  both, no new query or index), the timeline and replay fold it (``apply`` only moves the
  row's version, so ``replay --verify`` holds), the relay publishes it to the events streams
  for other consumers, and archiving a partition takes the calls with the rest of the run. A
  side table would need its own migration, row-level security, grants, retention and read.
- **The cost is one write per call**, batched with the other attempts' writes (group
  commit): an event, the stream head and the run row's version. A model call takes tens of
  milliseconds to seconds; the write is a small part of it.

What follows from it: the handler gets an answer only after its record is written, so no
answer is acted on without its record; a record refused because the lease was lost raises
E-RUN-002 to the handler (which is being stopped anyway), and the call, made but not recorded,
is only in the trace. A call cancelled while it runs (the attempt stopped) writes nothing.
The prompt and the answer are recorded for people to read, each capped to
:data:`TEXT_CHARS` characters (its head and a marker naming how much was cut: a long chat must
not bloat the log), with the token counts the model client reported. They are a record, not a
journal: a retried attempt calls the model again; wrap the call in ``run.step`` to journal the
answer. The attempt's trace context is in the event's metadata, like every event's.
"""

from __future__ import annotations

from datetime import datetime

from awooop.core.errors import AwoooPError
from awooop.core.events import ModelCalled
from awooop.core.excerpts import kept
from awooop.core.storable import sanitized
from awooop.llm.gateway import ModelCall

OK = "ok"
MAX_REASON_CHARS = 500
TEXT_CHARS = 4096  # the most of a prompt, and of an answer, that a ModelCalled keeps


def outcome_of(error: Exception | None) -> tuple[str, str]:
    """Pure: (outcome, reason) of a call: ``ok``, or its error's catalog code (E-INTERNAL-001
    for an error outside the catalog) and the error in words, storable whatever it says."""
    if error is None:
        return OK, ""
    code = error.code if isinstance(error, AwoooPError) else AwoooPError.code
    text = str(error)
    reason = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return code, sanitized(reason[:MAX_REASON_CHARS])


def called_event(call: ModelCall, *, worker_id: str, attempt: int, at: datetime) -> ModelCalled:
    """Pure: the ``ModelCalled`` event of ``call`` for ``(worker_id, attempt)``, written at
    ``at``. The model is the one that answered, else the one the policy asked for."""
    family, contract_id = call.contract
    outcome, reason = outcome_of(call.error)
    model = (
        call.result.model
        if call.result is not None
        else call.request.model
        if call.request is not None
        else None
    )
    routed = call.result or call.request
    prompt = call.request.prompt if call.request is not None else call.prompt
    return ModelCalled(
        at=at,
        worker_id=worker_id,
        attempt=attempt,
        contract_family=family,
        contract_id=contract_id,
        # A model server names its model in its answer: kept storable whatever it says.
        model=None if model is None else sanitized(model),
        revision_id=None if routed is None else routed.revision_id,
        body_hash=None if routed is None else routed.body_hash,
        started_at=call.started_at,
        duration_ms=round(call.duration_s * 1000, 3),
        outcome=outcome,
        reason=reason,
        prompt=kept(prompt, TEXT_CHARS),
        answer="" if call.result is None else kept(call.result.text, TEXT_CHARS),
        input_tokens=None if call.result is None else call.result.input_tokens,
        output_tokens=None if call.result is None else call.result.output_tokens,
        try_number=call.try_number,
        next_try_in_s=call.next_try_in_s,
    )
