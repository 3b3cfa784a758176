"""The replay's tail: the events committed after the bulk pass's cursor, applied to the shadows.

Two reads of the log, filtered to the projection's streams ($1..$3) and to the events the bulk
pass's snapshot ($7) did not see: ``TAIL_SAFE`` is commit-safe (as
``awooop.eventlog.eventlog.READ_FORWARD``, with the same ``FOLLOWER_HORIZON``), ``TAIL_ALL`` reads
everything committed and is used only inside the verify snapshot or the swap lock, where
nothing newer can commit in between.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from awooop.core.db import Connection
from awooop.eventlog.eventlog import FOLLOWER_HORIZON, Cursor
from awooop.projections.base import LogEvent, Projection, TableNames
from awooop.projections.bulk import to_log_event

TAIL_SAFE = (
    FOLLOWER_HORIZON
    + """
SELECT stream_id, version, project_id, position, event_type, data::text AS data,
       metadata->>'traceparent' AS traceparent, tx_id::text::bigint AS tx_id
FROM awooop_events, horizon
WHERE (tx_id, position) > ($4::text::xid8, $5::bigint)
  AND NOT pg_visible_in_snapshot(tx_id, $7::text::pg_snapshot)
  AND tx_id < horizon.h
  AND stream_id >= $1 AND stream_id < $2 AND ($3::text IS NULL OR project_id = $3)
ORDER BY awooop_events.tx_id, position
LIMIT $6
"""
)
TAIL_ALL = """
SELECT stream_id, version, project_id, position, event_type, data::text AS data,
       metadata->>'traceparent' AS traceparent, tx_id::text::bigint AS tx_id
FROM awooop_events
WHERE (tx_id, position) > ($4::text::xid8, $5::bigint)
  AND NOT pg_visible_in_snapshot(tx_id, $7::text::pg_snapshot)
  AND stream_id >= $1 AND stream_id < $2 AND ($3::text IS NULL OR project_id = $3)
ORDER BY tx_id, position
LIMIT $6
"""


@dataclass(frozen=True)
class Tail:
    """Where the tail reads (the projection's stream range and project) and writes (the
    shadows), and what it skips (the bulk pass's snapshot)."""

    projection: Projection
    shadows: TableNames
    low: str
    high: str
    project: str | None
    snapshot: str
    batch: int

    def _event(self, row: Any) -> LogEvent:
        return to_log_event(row, self.projection)

    async def follow(self, conn: Connection, cursor: Cursor, *, safe: bool) -> tuple[Cursor, int]:
        """Apply the events after ``cursor`` to the shadows; return the new cursor and count.

        ``safe``: only below each read's snapshot xmin, each batch in its own transaction.
        Otherwise everything the caller's transaction sees (verify snapshot, swap lock)."""
        applied = 0
        while True:
            rows: Sequence[Any] = await conn.fetch(
                TAIL_SAFE if safe else TAIL_ALL,
                self.low,
                self.high,
                self.project,
                str(cursor.tx_id),
                cursor.position,
                self.batch,
                self.snapshot,
            )
            if not rows:
                return cursor, applied
            grouped: dict[str, list[LogEvent]] = {}
            for r in rows:
                event = self._event(r)
                grouped.setdefault(event.stream_id, []).append(event)
            if safe:
                async with conn.transaction():
                    await self.projection.apply(conn, self.shadows, grouped)
            else:
                await self.projection.apply(conn, self.shadows, grouped)
            cursor = Cursor(rows[-1]["tx_id"], rows[-1]["position"])
            applied += len(rows)
            if len(rows) < self.batch:
                return cursor, applied
