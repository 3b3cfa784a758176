"""Reading committed events that the follower horizon still holds back (the relay's read-ahead).

:func:`awooop.eventlog.eventlog.read_forward` returns only rows of transactions older than every
running one, so a transaction held open anywhere in the cluster holds every follower back.
Such rows can still be published in per-stream order (docs/streams.md, "Reading ahead of the
horizon"): every writer of a stream moves its head row first, refuses to write when the head was
last written by a newer transaction (E-EVENT-002), and waits on the head's row lock while an
older transaction holds it. So when a committed transaction wrote a stream, no transaction still
running has written that stream before it or can write it later, and every earlier event of the
stream committed before it.

:func:`read_ahead` reads the committed rows after the cursor in one statement, with that
statement's snapshot (:class:`Snapshot`): the next read needs only rows of the transactions that
snapshot saw in progress or that started after it (``read_ahead_since.sql``).
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from awooop.core.db import Connection
from awooop.eventlog import queries
from awooop.eventlog.eventlog import Cursor, RecordedEvent

READ_AHEAD = queries.load("read_ahead")
READ_AHEAD_SINCE = queries.load("read_ahead_since")


class Snapshot(msgspec.Struct, frozen=True):
    """A ``pg_snapshot``: transactions below ``xmin`` had ended; ``xip`` were in progress;
    ``xmax`` and above had not started."""

    xmin: int
    xmax: int
    xip: tuple[int, ...] = ()


def parse_snapshot(text: str) -> Snapshot:
    """``pg_snapshot``'s text form, ``xmin:xmax:xip1,xip2,...``."""
    xmin, xmax, xip = text.split(":")
    return Snapshot(int(xmin), int(xmax), tuple(int(x) for x in xip.split(",") if x))


async def read_ahead(
    conn: Connection, cursor: Cursor, since: Snapshot | None, limit: int
) -> tuple[list[RecordedEvent], Snapshot]:
    """The committed events after ``cursor`` (of transactions ``since`` could not see, when
    given), in follower order, at most ``limit``; and the snapshot of the read."""
    if since is None:
        rows = await conn.fetch(READ_AHEAD, str(cursor.tx_id), cursor.position, limit)
    else:
        start = max((cursor.tx_id, cursor.position), (since.xmax, 0))
        rows = await conn.fetch(
            READ_AHEAD_SINCE,
            str(cursor.tx_id),
            cursor.position,
            [str(x) for x in since.xip if x >= cursor.tx_id],
            str(start[0]),
            start[1],
            limit,
        )
    snapshot = parse_snapshot(rows[0]["snapshot"])
    return [
        RecordedEvent(**{k: v for k, v in r.items() if k != "snapshot"})
        for r in rows
        if r["position"] is not None
    ], snapshot


READ_BY_POSITIONS = """
SELECT position, tx_id::text::bigint AS tx_id, event_id, stream_id, version, project_id,
       event_type, data::text AS data, metadata, recorded_at
FROM awooop_events
WHERE position = ANY($1::bigint[])
ORDER BY awooop_events.tx_id, position
"""


async def read_positions(conn: Connection, positions: Sequence[int]) -> list[RecordedEvent]:
    """The events at ``positions``, in follower order (a shard rebuild republishes what the
    relay had read ahead)."""
    rows = await conn.fetch(READ_BY_POSITIONS, list(positions))
    return [RecordedEvent(**dict(r.items())) for r in rows]
