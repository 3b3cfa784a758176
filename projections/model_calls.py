"""A run's model calls, read from its event stream: what the console's run page and ``awooop
runs show`` list under "Model calls".

Each ``run.llm`` call is a ``ModelCalled`` event on the run's stream (why an event and not a
table: :mod:`awooop.llm.calls`). Those pages already read the run's stream for the timeline,
so :func:`history_from_log` reads it once and folds both views from it with pure functions;
no projector table is needed and the list is exact even when projectors are behind. A call's
trace id is the one in its event's ``traceparent`` metadata, as in the timeline. A call's
prompt and answer (capped when recorded) and token counts are listed with it, and
:func:`token_totals` sums a run's tokens. The same read gives the run's failures
(:mod:`awooop.projections.failures`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

import msgspec

from awooop.core.db import Connection
from awooop.core.events import ModelCalled, run_stream_id
from awooop.eventlog import eventlog
from awooop.projections.base import trace_id_of
from awooop.projections.failures import FailureLine, failures
from awooop.projections.timeline import AttemptLine, TimelineLine, attempts, timeline_lines

EVENT_TYPE = "ModelCalled"


class ModelCallLine(msgspec.Struct, frozen=True, kw_only=True):
    """One model call of a run. ``revision_id`` and ``body_hash`` are those of the policy
    revision that served it (None: the default policy); ``model`` None: the call failed
    before it was routed; ``outcome``: ``ok`` or the error's code, ``reason`` the error."""

    version: int
    started_at: datetime
    recorded_at: datetime
    attempt: int
    worker_id: str
    contract_family: str
    contract_id: str
    model: str | None
    revision_id: uuid.UUID | None
    body_hash: str | None
    duration_ms: float
    outcome: str
    reason: str
    trace_id: str | None
    prompt: str = ""
    answer: str = ""
    input_tokens: int | None = None
    output_tokens: int | None = None
    try_number: int = 1  # of the call's tries (awooop.worker.policies)
    next_try_in_s: float | None = None  # failed, and tried again after this wait


class TokenTotals(msgspec.Struct, frozen=True, kw_only=True):
    """A run's model tokens: the sums over the calls that reported them (``counted`` of
    ``calls``; a call whose client reported no count adds nothing)."""

    input_tokens: int
    output_tokens: int
    counted: int
    calls: int


class RunHistory(msgspec.Struct, frozen=True, kw_only=True):
    timeline: list[TimelineLine]
    model_calls: list[ModelCallLine]
    failures: list[FailureLine] = msgspec.field(default_factory=list)

    @property
    def tokens(self) -> TokenTotals:
        return token_totals(self.model_calls)

    @property
    def attempts(self) -> list[AttemptLine]:
        """Each attempt with the handler version that ran it."""
        return attempts(self.timeline)


def token_totals(calls: Sequence[ModelCallLine]) -> TokenTotals:
    """Pure: the token totals of a run's model calls."""
    counted = [c for c in calls if c.input_tokens is not None or c.output_tokens is not None]
    return TokenTotals(
        input_tokens=sum(c.input_tokens or 0 for c in counted),
        output_tokens=sum(c.output_tokens or 0 for c in counted),
        counted=len(counted),
        calls=len(calls),
    )


def short_hash(body_hash: str) -> str:
    """Pure: a body hash as people compare it: 12 hex digits, without the ``sha256:`` tag."""
    return body_hash.rpartition(":")[2][:12]


def model_calls(recorded: Sequence[eventlog.RecordedEvent]) -> list[ModelCallLine]:
    """Pure: the model calls among one run's events (oldest first), in the order recorded."""
    lines = []
    for r in recorded:
        if r.event_type != EVENT_TYPE:
            continue
        event = r.decode()
        assert isinstance(event, ModelCalled)
        traceparent = r.metadata.get("traceparent") if r.metadata else None
        lines.append(
            ModelCallLine(
                version=r.version,
                started_at=event.started_at,
                recorded_at=event.at,
                attempt=event.attempt,
                worker_id=event.worker_id,
                contract_family=event.contract_family,
                contract_id=event.contract_id,
                model=event.model,
                revision_id=event.revision_id,
                body_hash=event.body_hash,
                duration_ms=event.duration_ms,
                outcome=event.outcome,
                reason=event.reason,
                trace_id=trace_id_of(traceparent if isinstance(traceparent, str) else None),
                prompt=event.prompt,
                answer=event.answer,
                input_tokens=event.input_tokens,
                output_tokens=event.output_tokens,
                try_number=event.try_number,
                next_try_in_s=event.next_try_in_s,
            )
        )
    return lines


async def history_from_log(conn: Connection, run_id: uuid.UUID) -> RunHistory:
    """The run's timeline, model calls and failures from one read of its event stream (a
    tenant transaction sees its own project's runs)."""
    recorded = await eventlog.read_stream(conn, run_stream_id(run_id))
    return RunHistory(
        timeline=timeline_lines(recorded),
        model_calls=model_calls(recorded),
        failures=failures(recorded),
    )
