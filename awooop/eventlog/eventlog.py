"""The event log (R-30): append with an expected version, follow by commit-safe position.

See ``migrations/0002_event_log.sql`` for why following is gap-free without serialising
writers. ``append`` runs inside the caller's transaction (which sets the tenant) and uses one
statement (``sql/append.sql``): it moves the stream head only if the head is at
``expected_version`` and was last written by an older transaction, then inserts the events.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import msgspec

from awooop.core.db import Connection
from awooop.core.errors import (
    StreamNotOfProjectError,
    StreamOrderConflictError,
    VersionConflictError,
    check_transaction_tenant,
)
from awooop.core.events import (
    DOMAIN_PREFIX,
    EventBase,
    decode_event,
    encode_event,
    event_type,
    stream_of_project,
)
from awooop.core.querier import Querier
from awooop.eventlog import queries

# --- SQL -----------------------------------------------------------------------------------

# The writing statements are in sql/ (loaded by name); the reads stay next to their callers.
APPEND = queries.load("append")
APPEND_MANY = queries.load("append_many")
APPEND_RUNS = queries.load("append_runs")  # several events of one stream among them
APPEND_AT_HEAD = queries.load("append_at_head")

EXPLAIN_CONFLICT = """
SELECT version, last_tx_id > pg_current_xact_id() AS newer_writer
FROM awooop_event_streams WHERE stream_id = $1
"""

READ_STREAM = """
SELECT position, tx_id::text::bigint AS tx_id, event_id, stream_id, version, project_id,
       event_type, data::text AS data, metadata, recorded_at
FROM awooop_events
WHERE stream_id = $1 AND version > $2
ORDER BY version
"""

# Followers: only rows of transactions older than the oldest one still running.
# The horizon is the oldest transaction still in progress, ignoring transactions that
# pg_stat_activity positively places in ANOTHER database of the cluster: they can never
# write to our tables, yet pg_snapshot_xmin counts them (a CREATE DATABASE or a long report
# elsewhere would hold every follower back). An xid that pg_stat_activity does not show is
# kept, so a stale or hidden row only makes the horizon more conservative, never unsafe.
FOLLOWER_HORIZON = """
WITH snap AS (SELECT pg_current_snapshot() AS s),
horizon AS (
    SELECT coalesce(
        (SELECT min(x) FROM pg_snapshot_xip(snap.s) AS x
          WHERE x::xid NOT IN (SELECT a.backend_xid FROM pg_stat_activity a
                                WHERE a.backend_xid IS NOT NULL
                                  AND a.datname IS DISTINCT FROM current_database())),
        pg_snapshot_xmax(snap.s)) AS h
    FROM snap
)
"""
READ_FORWARD = (
    FOLLOWER_HORIZON
    + """
SELECT position, tx_id::text::bigint AS tx_id, event_id, stream_id, version, project_id,
       event_type, data::text AS data, metadata, recorded_at
FROM awooop_events, horizon
WHERE (tx_id, position) > ($1::text::xid8, $2::bigint)
  AND tx_id < horizon.h
ORDER BY awooop_events.tx_id, position  -- the column, not the bigint alias: index order
LIMIT $3
"""
)

# The age of the oldest committed event after the cursor that the horizon holds back (NULL when
# none is): after a short batch, such an event means "re-check soon": no NOTIFY will announce
# the end of the older transaction that holds it.
# The horizon as a scalar subquery, not a join: READ_FORWARD_AND_HELD names it twice, so
# Postgres materialises the CTE, and a joined value would only filter rows the index scan had
# already walked (every committed row after the cursor: a whole backlog, 200k rows in 160 ms);
# a subquery's value bounds the index scan itself.
_HELD = """
    SELECT extract(epoch FROM clock_timestamp() - e.recorded_at)::float8 AS held_s
    FROM awooop_events AS e
    WHERE (e.tx_id, e.position) > ($1::text::xid8, $2::bigint)
      AND e.tx_id >= (SELECT h FROM horizon)
    ORDER BY e.tx_id, e.position
    LIMIT 1
"""
HELD_BACK = FOLLOWER_HORIZON + _HELD
# The relay's read at a wake-up: READ_FORWARD's batch and, in the same snapshot, _HELD (one
# statement where a trickle of commits used to cost two). The LEFT JOIN gives one row (batch
# columns NULL) when the batch is empty. Its sort costs a third of the relay's rate on full
# batches, so a backlog is read with READ_FORWARD and probed with HELD_BACK once at its end.
READ_FORWARD_AND_HELD = (
    FOLLOWER_HORIZON  # noqa: S608 - constant fragments: the horizon rule is written once
    + """, batch AS (
    SELECT position, tx_id::text::bigint AS tx_id, event_id, stream_id, version, project_id,
           event_type, data::text AS data, metadata, recorded_at
    FROM awooop_events
    WHERE (tx_id, position) > ($1::text::xid8, $2::bigint)
      AND tx_id < (SELECT h FROM horizon)
    ORDER BY awooop_events.tx_id, position
    LIMIT $3
), held AS ("""
    + _HELD
    + """)
SELECT batch.*, (SELECT held_s FROM held) AS held_s
FROM (SELECT 1) AS one LEFT JOIN batch ON true
ORDER BY batch.tx_id, batch.position
"""
)

# --- API -----------------------------------------------------------------------------------


def check_stream(stream_id: str, project_id: str) -> None:
    """Pure: refuse a stream name that is not one of ``project_id``'s (the rule the database
    checks on every row, migrations/0115_stream_names.sql), before anything is written."""
    if not stream_of_project(stream_id, project_id):
        raise StreamNotOfProjectError(
            f"{stream_id!r} is not a stream name of project {project_id!r}: run-<run id>, "
            f"domain/{project_id}/<name> or revision-{project_id}/<family>/<contract>",
            stream_id=stream_id,
            project_id=project_id,
        )


_metadata_encoder = msgspec.json.Encoder()


class RecordedEvent(msgspec.Struct, frozen=True, kw_only=True):
    position: int
    tx_id: int
    event_id: uuid.UUID
    stream_id: str
    version: int
    project_id: str
    event_type: str
    data: str
    metadata: dict[str, Any]
    recorded_at: datetime

    def decode(self) -> Any:
        return decode_event(self.data)


class Cursor(msgspec.Struct, frozen=True):
    """A follower's position: the last (tx_id, position) it has processed."""

    tx_id: int = 0
    position: int = 0


async def append(
    conn: Connection,
    stream_id: str,
    project_id: str,
    expected_version: int,
    events: Sequence[EventBase],
    metadata: dict[str, Any] | None = None,
) -> list[int]:
    """Append ``events`` at ``expected_version``; return their global positions. A name that
    is not one of the project's is refused before anything is written (E-EVENT-004)."""
    if not events:
        return []
    check_stream(stream_id, project_id)
    meta = _metadata_encoder.encode(metadata or {}).decode()
    rows = await conn.fetch(
        APPEND,
        stream_id,
        project_id,
        expected_version,
        [uuid.uuid4() for _ in events],
        [event_type(e) for e in events],
        [encode_event(e).decode() for e in events],
        [meta] * len(events),
    )
    if rows:
        return [r["position"] for r in rows]
    raise await refusal(conn, stream_id, expected_version)


async def refusal(
    conn: Connection, stream_id: str, expected: int
) -> StreamOrderConflictError | VersionConflictError:
    """Why a head refused to move from ``expected``: a newer transaction wrote it (E-EVENT-002)
    or it is not at ``expected`` (E-EVENT-001)."""
    current = await conn.fetchrow(EXPLAIN_CONFLICT, stream_id)
    if current is not None and current["version"] == expected and current["newer_writer"]:
        return StreamOrderConflictError(stream_id=stream_id)
    return VersionConflictError(
        stream_id=stream_id,
        expected=expected,
        actual=None if current is None else current["version"],
    )


async def read_stream(
    conn: Connection, stream_id: str, after_version: int = 0
) -> list[RecordedEvent]:
    rows = await conn.fetch(READ_STREAM, stream_id, after_version)
    return [RecordedEvent(**dict(r.items())) for r in rows]


async def read_forward(conn: Connection, cursor: Cursor, limit: int = 1000) -> list[RecordedEvent]:
    """The next committed events after ``cursor``, never skipping a late commit."""
    rows = await conn.fetch(READ_FORWARD, str(cursor.tx_id), cursor.position, limit)
    return [RecordedEvent(**dict(r.items())) for r in rows]


async def read_forward_and_held(
    conn: Connection, cursor: Cursor, limit: int = 1000
) -> tuple[list[RecordedEvent], float | None]:
    """:func:`read_forward`, and the age in seconds of the oldest committed event held back
    by an older running transaction (None when none is), read in one statement."""
    rows = await conn.fetch(READ_FORWARD_AND_HELD, str(cursor.tx_id), cursor.position, limit)
    held: float | None = rows[0]["held_s"]
    batch = [
        RecordedEvent(**{k: v for k, v in r.items() if k != "held_s"})
        for r in rows
        if r["position"] is not None
    ]
    return batch, held


async def held_back(conn: Connection, cursor: Cursor) -> float | None:
    """The age in seconds of the oldest committed event after ``cursor`` that an older running
    transaction holds back (None when none is)."""
    held: float | None = await conn.fetchval(HELD_BACK, str(cursor.tx_id), cursor.position)
    return held


def advance(cursor: Cursor, batch: Sequence[RecordedEvent]) -> Cursor:
    if not batch:
        return cursor
    last = batch[-1]
    return Cursor(last.tx_id, last.position)


# --- one event on each of many existing streams (the worker's batched write path) -----------


async def append_many(
    conn: Connection,
    appends: Sequence[tuple[str, str, int, EventBase]],
    metadata: dict[str, Any] | Sequence[dict[str, Any] | None] | None = None,
) -> dict[str, int]:
    """Append events to many existing streams in one statement.

    ``appends`` holds ``(stream_id, project_id, expected_version, event)``; a stream named
    more than once takes its events in order, at consecutive expected versions. The same rules
    as :func:`append` per stream; if any stream is not at its expected version (E-EVENT-001)
    or was last written by a newer transaction (E-EVENT-002), this raises and the caller's
    transaction must roll back (the other events were inserted). Returns the global position
    of each stream's last new event. ``metadata`` is one dict for every event or one per event.
    """
    if not appends:
        return {}
    streams = [a[0] for a in appends]
    first: dict[str, int] = {}  # each stream's expected version
    last: dict[str, int] = {}
    for stream_id, _project, expected, _event in appends:
        if stream_id in last and expected != last[stream_id] + 1:
            raise ValueError("append_many takes a stream's events at consecutive versions")
        first.setdefault(stream_id, expected)
        last[stream_id] = expected
    statement = APPEND_MANY if len(first) == len(appends) else APPEND_RUNS
    for stream_id, project_id, _expected, _event in appends:
        check_stream(stream_id, project_id)
    if metadata is None or isinstance(metadata, dict):
        metas = [_metadata_encoder.encode(metadata or {}).decode()] * len(appends)
    else:
        if len(metadata) != len(appends):
            raise ValueError("one metadata per event, or one for all")
        metas = [_metadata_encoder.encode(m or {}).decode() for m in metadata]
    rows = await conn.fetch(
        statement,
        streams,
        [a[2] for a in appends],
        [a[1] for a in appends],
        [uuid.uuid4() for _ in appends],
        [event_type(a[3]) for a in appends],
        [encode_event(a[3]).decode() for a in appends],
        metas,
    )
    positions = {r["stream_id"]: r["position"] for r in rows}  # in order: the last's
    if len(positions) == len(first):
        return positions
    for stream_id, expected in first.items():
        if stream_id not in positions:
            raise await refusal(conn, stream_id, expected)
    raise AssertionError("unreachable")


# --- events of a caller's own domain, appended at the stream's head (producer.emit) ----------

EXPLAIN_REFUSED_AT_HEAD = """
SELECT current_setting('awooop.project_id', true) AS tenant, awooop_tenant_bound($1) AS bound
"""

# Transaction-scoped advisory locks on the domain streams a transaction will append to, taken
# in hash order (no cycle between two emitters of the same streams, even when two stream ids
# share a hash). A transaction that has no id yet when it takes them (the producer's own, whose
# only earlier statement is the tenant setting) waits here for the previous emitter to COMMIT
# and only then gets its id at the append: it is newer than every earlier writer of the
# stream, so APPEND_AT_HEAD never refuses it. Without the lock, 30 emitters to one stream got
# their ids in one order and the head row's lock in another, and each one that lost that race
# was refused (E-EVENT-002) and retried; under load they exhausted the retries.
LOCK_HEADS = """
SELECT count(pg_advisory_xact_lock(k)) FROM (
    SELECT DISTINCT hashtextextended('awooop-head:' || s, 0) AS k FROM unnest($1::text[]) AS s
    ORDER BY k
) locks
"""


class RawEvent(msgspec.Struct, frozen=True):
    """An event that is not one of the runtime's own: its type and its data, a JSON object."""

    event_type: str
    data: str


class Appended(msgspec.Struct, frozen=True):
    event_id: uuid.UUID
    version: int
    position: int


async def lock_heads(conn: Querier, stream_ids: Sequence[str]) -> None:
    """Queue behind the other transactions appending at the head of ``stream_ids`` (held to
    the end of the caller's transaction, see :data:`LOCK_HEADS`). Taken before the transaction
    writes anything, it means :func:`append_at_head` cannot raise
    :class:`StreamOrderConflictError` for these streams; taken after, it still orders the
    emitters but a transaction already older than the stream's last writer is refused."""
    await conn.execute(LOCK_HEADS, list(stream_ids))


async def append_at_head(
    conn: Querier,
    stream_id: str,
    project_id: str,
    events: Sequence[RawEvent],
    metadata: dict[str, Any] | None = None,
) -> list[Appended]:
    """Append ``events`` after whatever the stream holds, inside the caller's tenant
    transaction (``awooop.project_id`` = ``project_id``). Raises
    :class:`ProducerTransactionError` when the transaction's tenant is another project, and
    :class:`TenantNotGrantedError` when a producer's login is not bound to the project, and
    :class:`StreamOrderConflictError` (retry the transaction) when a newer transaction wrote
    the stream last, and :class:`StreamNotOfProjectError` when ``stream_id`` is not a domain
    stream of ``project_id`` (``domain/<project>/<name>``); in each case nothing was written
    and the transaction can go on."""
    if not events:
        return []
    if not stream_id.startswith(DOMAIN_PREFIX):
        raise StreamNotOfProjectError(
            f"{stream_id!r} is not a domain stream (domain/<project>/<name>)", stream_id=stream_id
        )
    check_stream(stream_id, project_id)
    rows = await conn.fetch(
        APPEND_AT_HEAD,
        stream_id,
        project_id,
        [uuid.uuid4() for _ in events],
        [e.event_type for e in events],
        [e.data for e in events],
        _metadata_encoder.encode(metadata or {}).decode(),
    )
    if rows:
        return [Appended(r["event_id"], r["version"], r["position"]) for r in rows]
    refused = await conn.fetchrow(EXPLAIN_REFUSED_AT_HEAD, project_id)
    assert refused is not None  # no FROM: always one row
    check_transaction_tenant(project_id, refused["tenant"], refused["bound"])
    raise StreamOrderConflictError(stream_id=stream_id)
