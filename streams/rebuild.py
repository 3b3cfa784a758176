"""Rebuilding a shard's streams after Redis lost them (R-33).

Redis holds nothing that Postgres cannot rebuild. Each shard has an epoch key, written only by
the relay and only at the end of a rebuild; its absence means Redis lost the shard's data (a
flush, or a restart without persistence) or never had it. The relay then, for that shard:

1. ``RESET_BEGIN``: creates the ``workers`` group on the work stream and every group it had seen
   on the shard's streams, at ``0`` with MKSTREAM (every entry there was added after the loss),
   and records a reset token in ``epoch-pending``;
2. replays the shard's events from its safe point (``awooop_relay_shards``: below it every group
   had acknowledged everything) up to the relay cursor, to the events stream and dispatch events
   also to the work stream, exactly as the first time: every event some group might not have
   finished is delivered again, in log order; then the events the relay published ahead of its
   cursor (:mod:`awooop.streams.relay_ahead`), as the first time;
3. sends a work message for every run of the shard that Postgres says is PENDING or RESUMED (its
   latest event), so that no dispatchable run depends on Redis having kept anything. Runs whose
   latest event is past the relay cursor (and was not published ahead of it) are left to the
   normal publish, which keeps per-run
   order on the work stream. Duplicates are fine: workers take the DB lease;
4. ``RESET_FINISH``: moves the token to the epoch, but only if the token is still there. If
   Redis lost its data again meanwhile, the token is gone, the rebuild fails
   (E-STREAM-001) and the next iteration starts it over.

Steps 2 and 3 publish under the token as guard (the same atomic check-and-XADD as normal
publishing), so nothing is written into a stream whose groups were lost halfway. Consumers see
the new epoch and call their ``on_reset`` hook (projectors reconcile with Postgres).

Without a recorded safe point (no group ever consumed the shard while the relay watched) step 2
is skipped; step 3 still covers all dispatchable runs.

A shard that never had an epoch in ``awooop_relay_shards`` (a fresh install, a new shard
count) goes through the same steps but is *initialised*, not reset: it is not counted in
``awooop_stream_resets_total`` nor in the table's ``resets`` and is logged at info level, so a
fresh install reports no Redis loss.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from awooop.core import metrics
from awooop.core.db import Connection
from awooop.core.errors import StreamRebuildInterruptedError
from awooop.core.events import run_stream_sql
from awooop.core.leadership import Lease
from awooop.core.logs import get_logger
from awooop.eventlog import eventlog
from awooop.eventlog.eventlog import Cursor, RecordedEvent
from awooop.eventlog.read_ahead import read_positions
from awooop.streams import scripts
from awooop.streams.keys import Keys
from awooop.streams.publish import WORK_ONLY, by_shard, publish_shard

log = get_logger(__name__)

REPUBLISHED = 1  # Envelope.attempt of entries sent again by a rebuild

# --- SQL -----------------------------------------------------------------------------------

LOAD_SAFE_POINT = """
SELECT safe_tx_id, safe_position FROM awooop_relay_shards WHERE shard_count = $1 AND shard = $2
"""
PREVIOUS_EPOCH = """
SELECT epoch FROM awooop_relay_shards WHERE shard_count = $1 AND shard = $2
"""
# $4: 1 for a reset (the shard had an epoch), 0 for its first initialisation.
RECORD_RESET = """
INSERT INTO awooop_relay_shards AS s (shard_count, shard, epoch, resets) VALUES ($1, $2, $3, $4)
ON CONFLICT (shard_count, shard) DO UPDATE
    SET epoch = EXCLUDED.epoch, resets = s.resets + EXCLUDED.resets, updated_at = now()
"""
# The latest event of every dispatchable run (it is the event that made the run dispatchable)
# that the relay has already published once, by keyset pages on the dispatchable index.
DISPATCHABLE_RUNS = f"""
SELECT e.position, e.tx_id::text::bigint AS tx_id, e.event_id, e.stream_id, e.version,
       e.project_id, e.event_type, e.data::text AS data, e.metadata, e.recorded_at,
       r.created_at AS run_created_at, r.run_id
FROM awooop_run_state r
JOIN awooop_events e ON e.stream_id = {run_stream_sql("r.run_id")} AND e.version = r.version
WHERE r.status IN ('PENDING', 'RESUMED')
  AND ($1::timestamptz IS NULL OR (r.created_at, r.run_id) > ($1::timestamptz, $2::uuid))
  AND ((e.tx_id, e.position) <= ($3::text::xid8, $4::bigint) OR e.position = ANY($6::bigint[]))
ORDER BY r.created_at, r.run_id
LIMIT $5
"""  # noqa: S608 - constant identifiers

_EVENT_FIELDS = (
    "position",
    "tx_id",
    "event_id",
    "stream_id",
    "version",
    "project_id",
    "event_type",
    "data",
    "metadata",
    "recorded_at",
)


def new_epoch() -> str:
    """A fresh epoch value: unique, and sortable by creation time for humans."""
    return f"{int(time.time() * 1000)}-{uuid.uuid4().hex[:8]}"


def row_to_event(row: Any) -> RecordedEvent:
    return RecordedEvent(**{name: row[name] for name in _EVENT_FIELDS})


@dataclass
class ShardRebuild:
    conn: Connection
    redis: Any
    keys: Keys
    shard: int
    upto: Cursor  # the relay cursor: everything up to it was published once
    batch_size: int
    groups: dict[str, set[str]]  # stream -> groups to create there
    # The relay's lease: checked before each batch goes to Redis, and each batch sent counts
    # as work done (a long rebuild is not a stuck leader).
    lease: Lease | None = None
    # Positions the relay published ahead of ``upto`` (streams/relay_ahead.py), in log order.
    ahead: Sequence[int] = ()

    async def run(self) -> str:
        """Rebuild the shard; return the epoch it now has."""
        keys, shard = self.keys, self.shard
        token = new_epoch()
        streams = [stream for stream, names in self.groups.items() for _ in sorted(names)]
        names = [name for _, group_names in self.groups.items() for name in sorted(group_names)]
        began = await scripts.RESET_BEGIN(
            self.redis, [keys.epoch(shard), keys.epoch_pending(shard), *streams], [token, *names]
        )
        if not int(began):
            current = await self.redis.get(keys.epoch(shard))
            if current is None:
                raise StreamRebuildInterruptedError(shard=shard)
            return str(current.decode())
        # A shard that never had an epoch (a fresh install, a new shard count) is initialised,
        # not reset: it is neither counted nor logged as Redis data lost.
        first = await self.conn.fetchval(PREVIOUS_EPOCH, keys.shard_count, shard) is None
        say = log.info if first else log.warning
        say(
            "stream_shard_initialising" if first else "stream_shard_rebuild_started",
            shard=shard,
            token=token,
            groups=names,
        )
        replayed = await self._replay(token)
        redispatched = await self._redispatch(token)
        finished = await scripts.RESET_FINISH(
            self.redis, [keys.epoch_pending(shard), keys.epoch(shard)], [token]
        )
        if not int(finished):
            raise StreamRebuildInterruptedError(shard=shard)
        await self.conn.execute(RECORD_RESET, keys.shard_count, shard, token, 0 if first else 1)
        if not first:
            metrics.STREAM_RESETS.inc()
        say(
            "stream_shard_initialised" if first else "stream_shard_rebuilt",
            shard=shard,
            epoch=token,
            replayed=replayed,
            redispatched=redispatched,
        )
        return token

    async def _publish(self, token: str, items: list[tuple[str, bytes]]) -> None:
        if not items:
            return
        if self.lease is not None:
            self.lease.check()
        written = await publish_shard(
            self.redis, self.keys, self.shard, self.keys.epoch_pending(self.shard), token, items
        )
        if written < 0:
            raise StreamRebuildInterruptedError(shard=self.shard)
        if self.lease is not None:
            self.lease.progressed()

    async def _replay(self, token: str) -> int:
        row = await self.conn.fetchrow(LOAD_SAFE_POINT, self.keys.shard_count, self.shard)
        if row is None or row["safe_tx_id"] is None:
            return 0
        cursor = Cursor(row["safe_tx_id"], row["safe_position"])
        end = (self.upto.tx_id, self.upto.position)
        replayed = 0
        while (cursor.tx_id, cursor.position) < end:
            batch = await eventlog.read_forward(self.conn, cursor, self.batch_size)
            within = [e for e in batch if (e.tx_id, e.position) <= end]
            if not within:
                break
            mine = by_shard(within, self.keys, attempt=REPUBLISHED).get(self.shard, [])
            await self._publish(token, mine)
            replayed += len(mine)
            cursor = eventlog.advance(cursor, within)
        # Then what was published ahead of the cursor, after every earlier event of its streams
        # as the first time (only the log up to the cursor is known to come before it).
        safe = (row["safe_tx_id"], row["safe_position"])
        for start in range(0, len(self.ahead), self.batch_size):
            chunk = await read_positions(self.conn, self.ahead[start : start + self.batch_size])
            events = [e for e in chunk if (e.tx_id, e.position) > safe]
            mine = by_shard(events, self.keys, attempt=REPUBLISHED, ahead_of=end).get(
                self.shard, []
            )
            await self._publish(token, mine)
            replayed += len(mine)
        return replayed

    async def _redispatch(self, token: str) -> int:
        after: tuple[Any, Any] = (None, None)
        redispatched = 0
        while True:
            rows = await self.conn.fetch(
                DISPATCHABLE_RUNS,
                after[0],
                after[1],
                str(self.upto.tx_id),
                self.upto.position,
                self.batch_size,
                list(self.ahead),
            )
            if not rows:
                return redispatched
            after = (rows[-1]["run_created_at"], rows[-1]["run_id"])
            events = [row_to_event(row) for row in rows]
            mine = by_shard(events, self.keys, attempt=REPUBLISHED, route=WORK_ONLY).get(
                self.shard, []
            )
            await self._publish(token, mine)
            redispatched += len(mine)
            if len(rows) < self.batch_size:
                return redispatched
