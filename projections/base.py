"""The projection framework: what a projection declares, and the pure idempotency decision.

A projection follows the event streams whose id starts with ``stream_prefix`` and handles
every event type found there (``event_types`` declares them; an undeclared type in a followed
stream is an error, never skipped). Its view keeps, per stream, the version of the last event
it applied: that version is the projection's checkpoint, written in the same transaction as
the view rows, so a crash between the view write and the acknowledgement leaves nothing to
redo twice.

For every stream a batch touches, :func:`plan` compares the stored version with the delivered
versions: an old or duplicate event is a no-op, the next version is applied, and anything
beyond the next version is a gap that the runner fills from the Postgres log before applying
(never skipped).

The same projection code serves three callers, each with its own table names
(:class:`TableNames`): the projector runner (live tables), the replay tool's tail catch-up and
its bulk pass (shadow tables).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import msgspec

from awooop.core.errors import ProjectionStreamError
from awooop.core.events import DOMAIN_PREFIX, Event, decode_event, run_id_of_stream

if TYPE_CHECKING:
    from awooop.core.db import Connection
    from awooop.eventlog.eventlog import RecordedEvent
    from awooop.streams.envelope import Envelope

TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$")


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id in a W3C ``traceparent`` (None when absent or malformed)."""
    if not traceparent:
        return None
    match = TRACEPARENT.match(traceparent.strip())
    if match is None or match.group(1) == "0" * 32:
        return None
    return match.group(1)


class DomainData(msgspec.Struct, frozen=True):
    """A domain event's data (``awooop.producer.emit``): the caller's JSON object, which has no
    runtime type to decode into."""

    data: dict[str, Any]


_domain_decoder = msgspec.json.Decoder(dict[str, Any])


def decode_payload(stream_id: str, data: bytes | str) -> Event | DomainData:
    """An event as stored in the log: a runtime event, or a domain stream's JSON object."""
    if stream_id.startswith(DOMAIN_PREFIX):
        return DomainData(_domain_decoder.decode(data))
    return decode_event(data)


def runtime_event(event: LogEvent) -> Event:
    """The runtime event of a run's or a revision's stream (E-PROJECTION-002 for a domain
    event, which the built-in projections never follow)."""
    if isinstance(event.event, DomainData):
        raise ProjectionStreamError(
            f"stream {event.stream_id}: {event.event_type} is a domain event",
            stream_id=event.stream_id,
        )
    return event.event


class LogEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One event of the log as a projection sees it, from Postgres or from a stream message."""

    stream_id: str
    version: int
    project_id: str
    position: int
    event_type: str
    event: Event | DomainData
    traceparent: str | None = None

    @classmethod
    def from_recorded(cls, recorded: RecordedEvent) -> LogEvent:
        tp = recorded.metadata.get("traceparent") if recorded.metadata else None
        return cls(
            stream_id=recorded.stream_id,
            version=recorded.version,
            project_id=recorded.project_id,
            position=recorded.position,
            event_type=recorded.event_type,
            event=decode_payload(recorded.stream_id, recorded.data),
            traceparent=tp if isinstance(tp, str) else None,
        )

    @classmethod
    def from_envelope(cls, envelope: Envelope) -> LogEvent:
        return cls(
            stream_id=envelope.stream_id,
            version=envelope.version,
            project_id=envelope.project_id,
            position=envelope.position,
            event_type=envelope.event_type,
            event=decode_payload(envelope.stream_id, envelope.payload),
            traceparent=envelope.traceparent,
        )


# --- the idempotency decision (pure) ---------------------------------------------------------


@dataclass(frozen=True)
class StreamPlan:
    """What to do with the delivered events of one stream."""

    apply: tuple[int, ...]  # versions to apply now, consecutive after the stored version
    duplicates: tuple[int, ...]  # versions at or below the stored version (no-ops)
    fill_after: int | None  # a gap: read the log after this version (then apply all of it)


def plan(stored: int, delivered: Sequence[int]) -> StreamPlan:
    """Decide for one stream: ``stored`` is the view's version, ``delivered`` the versions
    that arrived (any order, duplicates allowed)."""
    duplicates = tuple(sorted(v for v in delivered if v <= stored))
    fresh = sorted({v for v in delivered if v > stored})
    if not fresh:
        return StreamPlan(apply=(), duplicates=duplicates, fill_after=None)
    if fresh != list(range(stored + 1, stored + 1 + len(fresh))):
        return StreamPlan(apply=(), duplicates=duplicates, fill_after=stored)
    return StreamPlan(apply=tuple(fresh), duplicates=duplicates, fill_after=None)


def check_consecutive(stored: int, events: Sequence[LogEvent]) -> None:
    """Raise unless ``events`` are exactly the versions after ``stored``, in order."""
    for expected, event in enumerate(events, start=stored + 1):
        if event.version != expected:
            raise ProjectionStreamError(
                f"stream {event.stream_id}: expected version {expected}, got {event.version}",
                stream_id=event.stream_id,
            )


# --- tables ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableSpec:
    """A table a projection owns. ``name`` is the live name; replay builds a shadow copy."""

    name: str
    key: tuple[str, ...]  # primary key columns: rows are matched on these
    columns: tuple[str, ...]  # every column, in COPY order
    project_column: str = "project_id"
    # Columns that may legitimately run ahead of the log when ``clock_condition`` (SQL over
    # the rebuilt row, alias ``s``) holds: the live value must be >= the rebuilt one.
    clock_columns: tuple[str, ...] = ()
    clock_condition: str = "false"
    # Columns of the live table outside ``columns`` (not folded from the log, not compared):
    # a swap copies them from the live row with the clock columns.
    carried_columns: tuple[str, ...] = ()
    # A short description of a row for reports (SQL over alias ``x``).
    label: str = ""


class TableNames:
    """Physical names for a projection's tables: live ones, or a replay's shadows."""

    def __init__(self, mapping: Mapping[str, str] | None = None) -> None:
        self._mapping = dict(mapping or {})

    def __getitem__(self, live_name: str) -> str:
        return self._mapping.get(live_name, live_name)


LIVE = TableNames()


@dataclass
class BulkOutput:
    """Rows produced by the bulk fold of one stream, per live table name."""

    rows: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict)

    def add(self, table: str, row: tuple[Any, ...]) -> None:
        self.rows.setdefault(table, []).append(row)


class Projection(Protocol):
    """A read model built from the event log."""

    name: ClassVar[str]
    description: ClassVar[str]
    event_types: frozenset[str]
    stream_prefix: str
    tables: tuple[TableSpec, ...]
    # Whether the runtime maintains it inline (run_state); inline projections have no projector.
    inline: bool
    # What an event of an undeclared type in a followed stream means: an error (the built-in
    # projections, which follow their own streams), or nothing to apply (a service's
    # projection, which follows streams other services write to as well).
    skips_undeclared: bool

    async def load_versions(
        self, conn: Connection, names: TableNames, stream_ids: Sequence[str]
    ) -> dict[str, int]:
        """The stored version of each stream (absent: 0). Runs under the streams' locks."""
        ...

    async def apply(
        self,
        conn: Connection,
        names: TableNames,
        events: Mapping[str, Sequence[LogEvent]],
    ) -> None:
        """Apply consecutive events (after each stream's stored version) and store the new
        versions with the view rows, in the caller's transaction."""
        ...

    def bulk_stream(self, events: Sequence[LogEvent], out: BulkOutput) -> None:
        """Fold one whole stream (versions 1..n) into rows for a fresh table."""
        ...

    def bulk_finish(self, out: BulkOutput) -> None:
        """Rows that depend on every stream (aggregates), after the last stream."""
        ...

    def merge_finish(
        self, parts: Sequence[dict[str, list[tuple[Any, ...]]]]
    ) -> dict[str, list[tuple[Any, ...]]]:
        """Combine the ``bulk_finish`` rows of bulk workers that each folded part of the log."""
        ...

    def lagging_sql(self, names: TableNames) -> str:
        """SQL returning (stream_id, project_id, log_version, view_version) for every stream of
        the log ($1: prefix, $2: optional project) whose view version is behind the log."""
        ...


@runtime_checkable
class AppliesInBulk(Protocol):
    """A projection whose bulk pass writes through the database (a service's ``apply``)
    instead of COPYing folded rows: the replay checks its tables first (and learns their
    columns), hands it each batch of ``bulk_stream``'s rows on a connection with the runtime's
    own codecs, and runs it in one process."""

    async def check_tables(self, conn: Connection) -> None:
        """Refuse tables the projection cannot run on; learn their columns."""
        ...

    async def bulk_write(
        self, conn: Connection, names: TableNames, rows: Sequence[tuple[Any, ...]]
    ) -> int:
        """Write a batch into the shadows ``names``; return how many rows it took."""
        ...


@runtime_checkable
class KeepsCheckpoints(Protocol):
    """A projection whose checkpoints live beside its view: the swap (or a project's repair)
    rewrites them in its locked transaction, after every committed event was applied."""

    async def checkpoints_rebuilt(self, conn: Connection, project: str | None) -> None: ...


def concat_parts(
    parts: Sequence[dict[str, list[tuple[Any, ...]]]],
) -> dict[str, list[tuple[Any, ...]]]:
    merged: dict[str, list[tuple[Any, ...]]] = {}
    for part in parts:
        for table, rows in part.items():
            merged.setdefault(table, []).extend(rows)
    return merged


class PerStreamRows:
    """A projection of one table (``table``, ``columns``) whose every row belongs to one
    stream, a row per event (no aggregates over streams): it applies and bulk-folds each
    stream from its head (what :meth:`heads` reads of the stream's rows) with :meth:`rows`;
    nothing is added after the last stream, and the bulk workers' parts need no merging
    beyond concatenation."""

    table: ClassVar[str]
    columns: ClassVar[tuple[str, ...]]

    async def heads(
        self, conn: Connection, names: TableNames, stream_ids: Sequence[str]
    ) -> dict[str, Any]:
        """What the stored rows of each stream say for the next ones (absent: a new stream)."""
        raise NotImplementedError

    def rows(self, head: Any, events: Sequence[LogEvent]) -> Sequence[msgspec.Struct]:
        """The rows of consecutive ``events`` after ``head`` (None: from the stream's start)."""
        raise NotImplementedError

    async def apply(
        self, conn: Connection, names: TableNames, events: Mapping[str, Sequence[LogEvent]]
    ) -> None:
        if not events:
            return
        heads = await self.heads(conn, names, list(events))
        rows = [
            msgspec.structs.astuple(r)
            for stream_id, stream_events in events.items()
            for r in self.rows(heads.get(stream_id), stream_events)
        ]
        await conn.executemany(insert_sql(names[self.table], self.columns), rows)

    def bulk_stream(self, events: Sequence[LogEvent], out: BulkOutput) -> None:
        for r in self.rows(None, events):
            out.add(self.table, msgspec.structs.astuple(r))

    def bulk_finish(self, out: BulkOutput) -> None:
        return None

    def merge_finish(
        self, parts: Sequence[dict[str, list[tuple[Any, ...]]]]
    ) -> dict[str, list[tuple[Any, ...]]]:
        return concat_parts(parts)


def stream_range(prefix: str) -> tuple[str, str]:
    """Bounds [low, high) of the stream ids that start with ``prefix`` (index-friendly)."""
    return prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)


def run_of(stream_id: str) -> uuid.UUID:
    """The run of a run's stream that a projection follows (E-PROJECTION-002 for another)."""
    run_id = run_id_of_stream(stream_id)
    if run_id is None:
        raise ProjectionStreamError(f"not a run's stream: {stream_id}", stream_id=stream_id)
    return run_id


# --- SQL shared by the projections (identifiers are the projections' constant table names) --


def insert_sql(table: str, columns: Sequence[str]) -> str:
    """INSERT of one row of ``columns`` into ``table``, parameters in column order."""
    params = ", ".join(f"${i + 1}" for i in range(len(columns)))
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({params})"  # noqa: S608 - constant identifiers


def lagging_sql(view_version: str) -> str:
    """The streams in [$1, $2) (of project $3, or all when NULL) whose log version is ahead of
    the view: ``view_version`` is a lateral or joined subquery ``v`` with the view's version of
    stream ``s`` (no row or NULL: nothing applied yet)."""
    return (
        "SELECT s.stream_id, s.project_id, s.version AS log_version, "  # noqa: S608 - constant identifiers
        f"coalesce(v.version, 0) AS view_version FROM awooop_event_streams s {view_version} "
        "WHERE s.stream_id >= $1 AND s.stream_id < $2 "
        "AND ($3::text IS NULL OR s.project_id = $3) AND s.version > coalesce(v.version, 0)"
    )


def lagging_rows_sql(table: str, match: str) -> str:
    """:func:`lagging_sql` for a view of a row per event: its version of stream ``s`` is the
    highest of its rows in ``table`` (alias ``t``) that ``match`` finds."""
    return lagging_sql(
        f"LEFT JOIN LATERAL (SELECT max(t.version) AS version FROM {table} t "  # noqa: S608 - constant identifiers
        f"WHERE {match}) v ON true"
    )
