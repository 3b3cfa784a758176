"""The event log (R-30): append with an expected version, follow by commit-safe position.

See ``migrations/0002_event_log.sql`` for why following is gap-free without serialising
writers. ``append`` runs inside the caller's transaction (which sets the tenant) and uses one
statement: it moves the stream head only if the head is at ``expected_version`` and was last
written by an older transaction, then inserts the events.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import msgspec

from awooop.db import Connection
from awooop.errors import StreamOrderConflictError, VersionConflictError
from awooop.events import EventBase, decode_event, encode_event, event_type

# --- SQL -----------------------------------------------------------------------------------

APPEND = """
WITH head AS (
    INSERT INTO awooop_event_streams AS s (stream_id, project_id, version, last_tx_id)
    VALUES ($1, $2, $3::int + cardinality($4::uuid[]), pg_current_xact_id())
    ON CONFLICT (stream_id) DO UPDATE
        SET version = EXCLUDED.version, last_tx_id = EXCLUDED.last_tx_id, updated_at = now()
        WHERE s.version = $3::int AND s.last_tx_id <= EXCLUDED.last_tx_id
    RETURNING s.version
)
INSERT INTO awooop_events (event_id, stream_id, version, project_id, event_type, data, metadata)
SELECT e.event_id, $1, $3::int + e.ord::int, $2, e.event_type, e.data::jsonb, e.metadata::jsonb
FROM head, unnest($4::uuid[], $5::text[], $6::text[], $7::text[])
    WITH ORDINALITY AS e(event_id, event_type, data, metadata, ord)
RETURNING position
"""

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
READ_FORWARD = """
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
SELECT position, tx_id::text::bigint AS tx_id, event_id, stream_id, version, project_id,
       event_type, data::text AS data, metadata, recorded_at
FROM awooop_events, horizon
WHERE (tx_id, position) > ($1::text::xid8, $2::bigint)
  AND tx_id < horizon.h
ORDER BY awooop_events.tx_id, position  -- the column, not the bigint alias: index order
LIMIT $3
"""

# --- API -----------------------------------------------------------------------------------

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
    """Append ``events`` at ``expected_version``; return their global positions."""
    if not events:
        return []
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
    current = await conn.fetchrow(EXPLAIN_CONFLICT, stream_id)
    if current is not None and current["version"] == expected_version and current["newer_writer"]:
        raise StreamOrderConflictError(stream_id=stream_id)
    raise VersionConflictError(
        stream_id=stream_id,
        expected=expected_version,
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


def advance(cursor: Cursor, batch: Sequence[RecordedEvent]) -> Cursor:
    if not batch:
        return cursor
    last = batch[-1]
    return Cursor(last.tx_id, last.position)
