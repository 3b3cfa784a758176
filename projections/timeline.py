"""The run timeline: one row per event of each run (``awooop_run_timeline``).

Each row carries the event's time (the database clock recorded in the event), the attempt it
belongs to, the worker that wrote it, the trace id (from the event's ``traceparent``
metadata, so a timeline row links to its trace in Tempo), its global log position and a small
detail object (step, tool, reason, actor, a step's ``started_at``, a model call's token counts
...; bulky fields like input, result, a traceback, a prompt and an answer are left out: they
are in the log and in run state).

The attempt of an event that names none (approvals, cancels) is the attempt of the run's
previous event; the per-stream version is the highest version stored for the run.

The timeline of ``awooop runs show`` is folded from the run's own event stream with this
projection's pure function (:func:`entries`), so it is exact
even when the ``run_timeline`` projector is behind or not running; each line also carries the
``actor`` recorded in the event's metadata by management changes.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar

import msgspec

from awooop.core.db import Connection
from awooop.core.events import run_stream_id, to_builtins
from awooop.eventlog import eventlog
from awooop.projections.base import (
    LogEvent,
    PerStreamRows,
    TableNames,
    TableSpec,
    check_consecutive,
    lagging_rows_sql,
    run_of,
    runtime_event,
    trace_id_of,
)
from awooop.projections.run_state import PREFIX, RUN_TYPES

TABLE = "awooop_run_timeline"
COLUMNS = (
    "run_id",
    "version",
    "project_id",
    "position",
    "event_type",
    "at",
    "attempt",
    "worker_id",
    "trace_id",
    "detail",
)
# Bulky fields stay in the log: a failure's traceback and a model call's prompt and answer are
# shown from their events (awooop.projections.model_calls, awooop.projections.failures).
LEFT_OUT = frozenset(
    {
        "type",
        "at",
        "attempt",
        "worker_id",
        "input",
        "result",
        "traceback",
        "prompt",
        "answer",
        "payload",
    }
)
# Event fields newer than the oldest release that may run beside this one (docs/releases.md),
# by event type. The projector's table leaves them out of ``detail``: that release's projector
# and its ``replay run_timeline --verify`` (after a rollback) fold the same events without
# them, and would call every row written here with them different. The timeline folded from a
# run's own stream for the run page and ``awooop runs show`` (:func:`timeline_lines`) has
# them. A field leaves this table once every release that may run beside knows it.
NEWER_FIELDS: dict[str, frozenset[str]] = {
    "RunClaimed": frozenset({"handler_version"}),
    "StepCompleted": frozenset({"started_at", "tries", "try_errors"}),
    "RunFailed": frozenset({"step"}),
    "LeaseReleased": frozenset({"step"}),
    "ModelCalled": frozenset({"input_tokens", "output_tokens", "try_number", "next_try_in_s"}),
    "ToolResultReceived": frozenset({"others"}),
    "ApprovalRequested": frozenset({"on_reject", "on_expire", "expires_in_s"}),
    "ApprovalGranted": frozenset({"reason"}),
    "ApprovalRejected": frozenset({"resumed"}),
    "ApprovalExpired": frozenset({"resumed"}),
    "RunCreated": frozenset({"parent_run_id", "cancel_with_parent"}),
    "WaitStarted": frozenset({"step", "kind", "due_at", "name", "match", "children", "needed"}),
    "TimerFired": frozenset({"step", "kind", "due_at"}),
    "SignalDelivered": frozenset({"step", "name", "signal_id", "key", "payload", "sent_by"}),
    "ChildrenFinished": frozenset({"step", "results", "finished"}),
}

# --- SQL ------------------------------------------------------------------------------------


def _heads(table: str) -> str:
    return (
        f"SELECT DISTINCT ON (run_id) run_id, version, attempt FROM {table} "  # noqa: S608 - constant identifiers
        "WHERE run_id = ANY($1::uuid[]) ORDER BY run_id, version DESC"
    )


SELECT_TIMELINE = """
SELECT run_id, version, project_id, position, event_type, at, attempt, worker_id, trace_id, detail
FROM awooop_run_timeline WHERE run_id = $1 ORDER BY version
"""


# --- pure ------------------------------------------------------------------------------------


class TimelineEntry(msgspec.Struct, frozen=True, kw_only=True):
    run_id: uuid.UUID
    version: int
    project_id: str
    position: int
    event_type: str
    at: datetime
    attempt: int
    worker_id: str | None
    trace_id: str | None
    detail: dict[str, Any]


def entry(previous_attempt: int, event: LogEvent, *, newer: bool = False) -> TimelineEntry:
    """The timeline row of ``event``; ``previous_attempt`` is the attempt of the run's
    previous event (0 before the first claim). ``newer``: keep the fields of
    :data:`NEWER_FIELDS` in ``detail`` (not for the projector's table)."""
    body = runtime_event(event)
    attempt = getattr(body, "attempt", None)
    worker = getattr(body, "worker_id", None)
    left_out = LEFT_OUT if newer else LEFT_OUT | NEWER_FIELDS.get(event.event_type, frozenset())
    return TimelineEntry(
        run_id=run_of(event.stream_id),
        version=event.version,
        project_id=event.project_id,
        position=event.position,
        event_type=event.event_type,
        at=body.at,
        attempt=previous_attempt if attempt is None else attempt,
        worker_id=worker,
        trace_id=trace_id_of(event.traceparent),
        detail={k: v for k, v in to_builtins(body).items() if k not in left_out and telling(k, v)},
    )


# Retry fields (awooop.worker.policies) at the value of a single try say nothing more than an
# absent field: left out, as None values are.
ONE_TRY: dict[str, Any] = {"tries": 1, "try_number": 1}


def telling(field: str, value: Any) -> bool:
    """Pure: whether an event's field says something in a timeline's ``detail``."""
    if field == "try_errors":
        return bool(value)
    return value is not None and not (field in ONE_TRY and ONE_TRY[field] == value)


def entries(
    head: tuple[int, int] | None, events: Sequence[LogEvent], *, newer: bool = False
) -> tuple[list[TimelineEntry], tuple[int, int]]:
    """Rows for ``events`` after ``head`` = (version, attempt); returns them and the new head.
    ``newer``: as for :func:`entry`."""
    version, attempt = head or (0, 0)
    check_consecutive(version, events)
    rows = []
    for e in events:
        row = entry(attempt, e, newer=newer)
        attempt = row.attempt
        rows.append(row)
    return rows, (rows[-1].version if rows else version, attempt)


class TimelineProjection(PerStreamRows):
    name: ClassVar[str] = "run_timeline"
    description: ClassVar[str] = "awooop_run_timeline: every event of every run, in order"
    inline = False
    skips_undeclared = False
    event_types = RUN_TYPES
    stream_prefix = PREFIX
    tables: tuple[TableSpec, ...] = (
        TableSpec(name=TABLE, key=("run_id", "version"), columns=COLUMNS, label="run_id"),
    )

    table = TABLE
    columns = COLUMNS

    async def heads(
        self, conn: Connection, names: TableNames, stream_ids: Sequence[str]
    ) -> dict[str, tuple[int, int]]:
        rows = await conn.fetch(_heads(names[TABLE]), [run_of(s) for s in stream_ids])
        return {run_stream_id(r["run_id"]): (r["version"], r["attempt"]) for r in rows}

    async def load_versions(
        self, conn: Connection, names: TableNames, stream_ids: Sequence[str]
    ) -> dict[str, int]:
        return {s: h[0] for s, h in (await self.heads(conn, names, stream_ids)).items()}

    def rows(
        self, head: tuple[int, int] | None, events: Sequence[LogEvent]
    ) -> Sequence[msgspec.Struct]:
        return entries(head, events)[0]

    def lagging_sql(self, names: TableNames) -> str:
        return lagging_rows_sql(
            names[TABLE], f"t.run_id = substr(s.stream_id, {len(PREFIX) + 1})::uuid"
        )


async def timeline(conn: Connection, run_id: uuid.UUID) -> list[TimelineEntry]:
    """A run's timeline, oldest first (a tenant transaction sees its own project's runs)."""
    rows = await conn.fetch(SELECT_TIMELINE, run_id)
    return [msgspec.convert(dict(r.items()), TimelineEntry, strict=False) for r in rows]


class TimelineLine(msgspec.Struct, frozen=True, kw_only=True):
    version: int
    at: datetime
    event_type: str
    attempt: int
    worker_id: str | None
    trace_id: str | None
    actor: str | None
    detail: dict[str, Any]


def timeline_lines(recorded: list[eventlog.RecordedEvent]) -> list[TimelineLine]:
    """The timeline of one run's events (oldest first), with each event's metadata actor."""
    rows, _ = entries(None, [LogEvent.from_recorded(r) for r in recorded], newer=True)
    lines = []
    for row, event in zip(rows, recorded, strict=True):
        actor = event.metadata.get("actor") if event.metadata else None
        lines.append(
            TimelineLine(
                version=row.version,
                at=row.at,
                event_type=row.event_type,
                attempt=row.attempt,
                worker_id=row.worker_id,
                trace_id=row.trace_id,
                actor=actor if isinstance(actor, str) else None,
                detail=row.detail,
            )
        )
    return lines


class AttemptLine(msgspec.Struct, frozen=True, kw_only=True):
    """An attempt of a run: when it was claimed, by which worker, running which code version
    of its handler (``RunClaimed.handler_version``; None: not recorded, as before the field)."""

    attempt: int
    claimed_at: datetime
    worker_id: str | None
    handler_version: str | None


def attempts(lines: Sequence[TimelineLine]) -> list[AttemptLine]:
    """Pure: a run's attempts (one per ``RunClaimed``), oldest first."""
    found = []
    for ln in lines:
        if ln.event_type == "RunClaimed":
            version = ln.detail.get("handler_version")
            found.append(
                AttemptLine(
                    attempt=ln.attempt,
                    claimed_at=ln.at,
                    worker_id=ln.worker_id,
                    handler_version=version if isinstance(version, str) else None,
                )
            )
    return found


def steps_in_run_order(
    saga_steps: Mapping[str, Any], lines: Sequence[TimelineLine]
) -> dict[str, Any]:
    """Pure: a run's journaled steps in the order they ran (by the version of each step's
    last ``StepCompleted``), not the stored object's key order; a step the lines do not name
    comes last."""
    ran: dict[str, int] = {}
    for ln in lines:
        step = ln.detail.get("step")
        if ln.event_type == "StepCompleted" and isinstance(step, str):
            ran[step] = ln.version
    order = sorted(saga_steps, key=lambda name: (name not in ran, ran.get(name, 0)))
    return {name: saga_steps[name] for name in order}
