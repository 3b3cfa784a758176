"""Trimming the relay's streams, and each shard's safe replay point.

Trimming policy (script ``TRIM`` in :mod:`awooop.streams.scripts`), run every
``AWOOOP_RELAY_TRIM_INTERVAL_S``: a stream with consumer groups is trimmed with ``MINID ~`` below
the smallest id any group still needs (its oldest pending entry, which may yet be reclaimed, or
else its last-delivered id). Entries a group has not read or not acknowledged are never
trimmed; a group that stops consuming therefore holds its stream (watch
``awooop_consumer_group_lag``; XGROUP DESTROY a retired group). A stream without groups is
capped with ``MAXLEN ~ AWOOOP_STREAM_MAXLEN``; so are the notices (read with plain XREAD, no
groups). The floor entry also gives the shard's safe replay point
(below it every group had acknowledged everything), stored in ``awooop_relay_shards``.
"""

from __future__ import annotations

from awooop.core import metrics
from awooop.core.db import Connection
from awooop.eventlog.eventlog import Cursor
from awooop.streams import scripts
from awooop.streams.envelope import FIELD, Envelope, decode_envelope
from awooop.streams.relay_shards import ShardPublisher

# --- SQL -----------------------------------------------------------------------------------

STORE_SAFE_POINT = """
INSERT INTO awooop_relay_shards AS s (shard_count, shard, safe_tx_id, safe_position)
VALUES ($1, $2, $3, $4)
ON CONFLICT (shard_count, shard) DO UPDATE
    SET safe_tx_id = EXCLUDED.safe_tx_id, safe_position = EXCLUDED.safe_position,
        updated_at = now()
    WHERE s.safe_tx_id IS NULL
       OR (s.safe_tx_id, s.safe_position) < (EXCLUDED.safe_tx_id, EXCLUDED.safe_position)
"""


def cursor_key(cursor: Cursor) -> tuple[int, int]:
    return (cursor.tx_id, cursor.position)


async def trim(conn: Connection, shards: ShardPublisher, upto: Cursor, stream_maxlen: int) -> None:
    """Trim every published shard's streams; store the safe replay point they allow.

    ``upto``: the relay's published position (publishing and trimming take turns).
    """
    keys = shards.keys
    for shard in keys.shards():
        if shard not in shards.epochs:
            continue  # lost: the next iteration rebuilds it; its group list is kept until then
        floors: list[Cursor] = []
        for stream in (keys.events_stream(shard), keys.work_stream(shard)):
            floor = await _trim_stream(shards, stream, upto, stream_maxlen)
            if floor is not None:
                floors.append(floor)
        if floors:
            shards.lease.check()
            safe = min(floors, key=cursor_key)
            await conn.execute(STORE_SAFE_POINT, keys.shard_count, shard, safe.tx_id, safe.position)


async def _trim_stream(
    shards: ShardPublisher, stream: str, upto: Cursor, stream_maxlen: int
) -> Cursor | None:
    """Trim one stream; return the safe replay point its groups allow (None: no bound)."""
    trimmed, _floor, data, drained, stats = await scripts.TRIM(
        shards.redis, [stream], [str(stream_maxlen), FIELD]
    )
    if int(trimmed) < 0:
        return None  # no such stream (yet, or lost): keep the groups seen before
    names: set[str] = set()
    for name, pending, lag in stats:
        group = name.decode()
        names.add(group)
        metrics.CONSUMER_PENDING.labels(stream, group).set(int(pending))
        if int(lag) >= 0:
            metrics.CONSUMER_LAG.labels(stream, group).set(int(lag))
    shards.groups[stream] = names  # a rebuild recreates these groups
    if not names:
        return None
    if int(drained):
        # Every group acknowledged the last entry: all this relay published to the stream
        # (everything up to its cursor; publishing and trimming take turns) is done.
        return upto
    if not data:
        return None
    return safe_point_of(decode_envelope(data))


def safe_point_of(floor: Envelope) -> Cursor:
    """The safe replay point below a stream's floor entry: everything before that entry was
    acknowledged by every group. An entry published ahead of the cursor
    (streams/relay_ahead.py) may have older rows of the log after it in the stream: only the
    log up to the cursor it was published at is known to come before it."""
    safe = Cursor(floor.tx_id, floor.position - 1)
    if floor.ahead_of is not None:
        safe = min(safe, Cursor(*floor.ahead_of), key=cursor_key)
    return safe
