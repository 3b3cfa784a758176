"""Publishing a batch to Redis, shard by shard, under each shard's epoch (rebuilding lost ones).

Per-run order: each shard's part of a batch goes to Redis in ONE script call (all its XADDs,
in log order), and a run's events all map to one shard. A failed call is retried whole, so
the first copy of each event always arrives in version order; duplicates can only repeat an
already delivered prefix. A shard whose epoch is gone (Redis lost it, R-33) is rebuilt from the
log first (:mod:`awooop.streams.rebuild`). Before each publish the leader checks its local lease
deadline (:meth:`Lease.check`), so a process resumed after its lease ran out publishes nothing.

Trace context: each batch has a ``relay publish`` span linked to (up to 32 of) the producer
spans.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from awooop.core.db import Connection
from awooop.core.errors import StreamRebuildInterruptedError
from awooop.core.leadership import Lease
from awooop.core.logs import get_logger
from awooop.core.telemetry import span_link, tracer
from awooop.eventlog.eventlog import Cursor, RecordedEvent
from awooop.streams.keys import WORKER_GROUP, Keys
from awooop.streams.publish import publish_shard
from awooop.streams.rebuild import ShardRebuild, new_epoch

log = get_logger(__name__)

MAX_LINKS = 32

Grouped = dict[int, list[tuple[str, bytes]]]  # shard -> (stream, envelope) in log order


class ShardPublisher:
    """The epoch each shard is published under, and the groups seen on its streams."""

    def __init__(
        self,
        *,
        redis: Any,
        keys: Keys,
        lease: Lease,
        batch_size: int,
        published_ahead: Callable[[Cursor], list[int]] = lambda _cursor: [],
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.lease = lease
        self.batch_size = batch_size
        # The positions the relay published ahead of a cursor, in log order (a rebuild sends
        # them again after the log up to the cursor: streams/relay_ahead.py).
        self.published_ahead = published_ahead
        self.epochs: dict[int, str] = {}  # shard -> epoch the relay publishes under
        self.groups: dict[str, set[str]] = {}  # stream -> groups seen there (for rebuilds)

    async def publish_batch(
        self,
        conn: Connection,
        upto: Cursor,
        batch: Sequence[RecordedEvent],
        grouped: Grouped,
        may_rebuild: bool,
    ) -> Grouped:
        """:meth:`publish` inside the batch's ``relay publish`` span."""
        links = [
            link
            for event in batch[:MAX_LINKS]
            for link in span_link(
                event.metadata.get("traceparent"), event.metadata.get("tracestate")
            )
        ]
        with tracer.start_as_current_span(
            "relay publish", links=links, attributes={"awooop.core.events": len(batch)}
        ):
            return await self.publish(conn, upto, grouped, may_rebuild=may_rebuild)

    async def publish(
        self, conn: Connection, upto: Cursor, grouped: Grouped, *, may_rebuild: bool = True
    ) -> Grouped:
        """XADD each shard's entries under the shard's epoch, rebuilding lost shards first.

        With ``may_rebuild=False`` (while the Postgres connection is busy) shards that need a
        rebuild are left out and returned; otherwise everything is published or it raises.
        """
        remaining = dict(grouped)
        for _ in range(3):
            if may_rebuild:
                for shard in sorted(remaining):
                    if shard not in self.epochs:
                        await self.rebuild(conn, upto, shard)
            ready = sorted(shard for shard in remaining if shard in self.epochs)
            if not ready:
                break
            self.lease.check()  # never publish past the local lease deadline
            calls = [
                publish_shard(
                    self.redis,
                    self.keys,
                    shard,
                    self.keys.epoch(shard),
                    self.epochs[shard],
                    remaining[shard],
                )
                for shard in ready
            ]
            # One shard (a trickle of commits): no tasks to gather.
            results = [await calls[0]] if len(calls) == 1 else await asyncio.gather(*calls)
            for shard, result in zip(ready, results, strict=True):
                if result >= 0:
                    del remaining[shard]
                    continue
                self.epochs.pop(shard, None)
                current = await self.redis.get(self.keys.epoch(shard))
                if current is not None:  # another relay rebuilt it: adopt its epoch
                    self.epochs[shard] = current.decode()
            if not remaining:
                return {}
        if may_rebuild:
            raise StreamRebuildInterruptedError(shards=sorted(remaining))
        return remaining

    async def check_epochs(self, conn: Connection, upto: Cursor) -> None:
        """Adopt each shard's epoch; rebuild shards whose epoch is gone (Redis lost them)."""
        pipe = self.redis.pipeline(transaction=False)
        for shard in self.keys.shards():
            pipe.get(self.keys.epoch(shard))
        pipe.set(self.keys.notices_epoch(), new_epoch(), nx=True)
        *values, notices_reset = await pipe.execute()
        if notices_reset:
            log.warning("notices_epoch_written", key=self.keys.notices_epoch())
        for shard, value in zip(self.keys.shards(), values, strict=True):
            if value is None:
                self.epochs.pop(shard, None)
                await self.rebuild(conn, upto, shard)
            else:
                self.epochs[shard] = value.decode()

    async def rebuild(self, conn: Connection, upto: Cursor, shard: int) -> None:
        self.lease.check()
        epoch = await ShardRebuild(
            conn=conn,
            redis=self.redis,
            keys=self.keys,
            shard=shard,
            upto=upto,
            batch_size=self.batch_size,
            lease=self.lease,
            ahead=self.published_ahead(upto),
            groups={
                self.keys.work_stream(shard): {WORKER_GROUP}
                | self.groups.get(self.keys.work_stream(shard), set()),
                self.keys.events_stream(shard): self.groups.get(
                    self.keys.events_stream(shard), set()
                ),
            },
        ).run()
        self.epochs[shard] = epoch
        self.lease.progressed()  # a shard rebuilt (or initialised: nothing to publish) is work done
