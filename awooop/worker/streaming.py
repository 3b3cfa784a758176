"""The worker's stream path (R-16): the work streams read by group ``workers``, the touch of
its own pending entries, and the ``worker-reclaim`` loop.

- Every shard's work stream is read through :class:`awooop.streams.consumer.GroupConsumer` with the
  worker id as consumer name. A delivery names a run (the dispatch event's stream); the worker
  takes the lease (:meth:`Worker.take`) and runs it; the entry is acknowledged when the run is
  finished, cancelled, released or waiting for approval, and left pending while a live lease
  elsewhere holds it.
- The heartbeat touches (``XCLAIM ... JUSTID``) the entries of the runs whose leases it just
  renewed, and only those: an entry of a run whose lease could not be renewed becomes idle and
  reclaimable like a dead consumer's.
- ``worker-reclaim`` (a loop, every ``AWOOOP_RECLAIM_INTERVAL_S``) claims entries idle longer
  than the lease and reconciles them with Postgres (:mod:`awooop.worker.reclaim`); an entry
  left pending for a run that a live lease elsewhere holds gets its delivery count back.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from collections.abc import Awaitable
from typing import Any

from redis.exceptions import ResponseError

from awooop.core import metrics
from awooop.core.config import Settings
from awooop.core.errors import DeliveryLimitError
from awooop.core.events import run_id_of_stream
from awooop.core.logs import get_logger
from awooop.core.loops import LoopCategory, LoopContext, LoopSpec
from awooop.core.retries import CONNECTION_ERRORS
from awooop.runs import leases
from awooop.streams.consumer import GroupConsumer
from awooop.streams.consumer_groups import is_nogroup
from awooop.streams.delivery import Delivery
from awooop.streams.envelope import encode
from awooop.streams.keys import WORKER_GROUP, Keys
from awooop.streams.reclaim import autoclaim, set_deliveries, touch
from awooop.streams.tracing import consume_span
from awooop.worker.attempts import StreamEntry, trace_metadata
from awooop.worker.local_timers import LocalTimers
from awooop.worker.outcomes import infrastructure_failure
from awooop.worker.reclaim import (
    ReclaimAction,
    dead_letter_reason,
    held_delivery_count,
    reclaim_action,
)
from awooop.worker.runtime import Worker

log = get_logger("awooop.worker")

RECLAIM_LOOP = "worker-reclaim"


async def nothing_to_take() -> bool:
    return True  # acknowledged


class StreamIntake:
    def __init__(
        self,
        worker: Worker,
        redis: Any,
        keys: Keys,
        settings: Settings,
        timers: LocalTimers | None = None,
    ) -> None:
        self.worker = worker
        self.timers = timers  # the sleeps this worker fires itself (local_timers.py)
        self.redis = redis
        self.keys = keys
        self.settings = settings
        self.streams = [keys.work_stream(shard) for shard in keys.shards()]
        self.consumer = GroupConsumer(
            redis,
            group=WORKER_GROUP,
            consumer=worker.worker_id,
            streams=self.streams,
            handler=self.handle,
            max_in_flight=worker.concurrency,
            keys=keys,
            db=worker.db,
        )
        worker.heartbeat.touch = self.touch
        worker.intake_activity = lambda: self.consumer.stats.handled

    # --- first deliveries ---------------------------------------------------------------------

    def handle(self, delivery: Delivery) -> Awaitable[bool]:
        """The delivery's run taken and run (:meth:`Worker.take`): its coroutine, with no
        frame of this method's own (and no reference to the delivery) left around it for as
        long as the run runs."""
        env = delivery.envelope
        run_id = run_id_of_stream(env.stream_id)
        if run_id is None:
            return nothing_to_take()  # not a run's dispatch event: nothing for workers
        entry = StreamEntry(delivery.stream, delivery.entry_id)
        if self.timers is not None and env.event_type == "TimerFired":
            # a TimerFired this worker wrote: its own claim answers (local_timers.py)
            claim = self.timers.settled(run_id, env.version)
            if claim is not None:
                return self._settled_or_take(claim, run_id, env.project_id, entry)
        return self.worker.take(run_id, env.project_id, path="stream", entry=entry)

    async def _settled_or_take(
        self, claim: Awaitable[bool], run_id: uuid.UUID, project_id: str, entry: StreamEntry
    ) -> bool:
        """True when this worker's own claim of the run it fired took the lease; else the
        delivery's run taken as any other's."""
        if await claim:
            return True
        return await self.worker.take(run_id, project_id, path="stream", entry=entry)

    async def run(self, stop: asyncio.Event) -> None:
        await self.consumer.run(stop)
        await self._leave_group()

    async def touch(self, entries: list[StreamEntry]) -> None:
        by_stream: dict[str, list[str]] = defaultdict(list)
        for entry in entries:
            by_stream[entry.stream].append(entry.entry_id)
        for stream, ids in by_stream.items():
            await touch(self.redis, stream, WORKER_GROUP, self.worker.worker_id, ids)

    # --- reclaim ------------------------------------------------------------------------------

    def reclaim_spec(self) -> LoopSpec:
        async def body(_ctx: LoopContext) -> None:
            await self.reclaim_once()

        return LoopSpec(
            name=RECLAIM_LOOP,
            category=LoopCategory.PLATFORM,
            interval_s=self.settings.reclaim_interval_s,
            body=body,
            description="claim work entries idle longer than the lease; reconcile (R-16)",
        )

    async def reclaim_once(self) -> int:
        """Claim idle entries (as many as free slots) and handle each; return how many."""
        min_idle_ms = int(self.settings.lease_ttl_s * 1000)
        claimed = 0
        for stream in self.streams:
            free = self.worker.free_slots()
            if free <= 0 or self.worker.stopping():
                break
            try:
                deliveries = await autoclaim(
                    self.redis,
                    stream,
                    WORKER_GROUP,
                    self.worker.worker_id,
                    min_idle_ms,
                    free,
                    keys=self.keys,
                    db=self.worker.db,
                )
            except ResponseError as exc:
                if not is_nogroup(exc):
                    raise
                continue  # no stream or group yet (the consumer creates it): nothing pending
            for delivery in deliveries:
                claimed += 1
                self.worker.spawn(self._reclaimed(delivery))
        return claimed

    async def _reclaimed(self, delivery: Delivery) -> None:
        with consume_span(delivery):
            try:
                outcome = await self._reconcile(delivery)
            except Exception as exc:
                outcome = "error"
                if isinstance(exc, CONNECTION_ERRORS) or infrastructure_failure(exc):
                    # Postgres (or Redis) could not serve this reclaim: the message did not
                    # kill a consumer, so this delivery is not one (see reclaim.py).
                    log.warning("reclaim_failed", entry_id=delivery.entry_id, error=repr(exc))
                    await self._take_back(delivery)
                else:
                    log.exception("reclaim_failed", entry_id=delivery.entry_id)
        metrics.RECLAIMS.labels(outcome).inc()

    async def _take_back(self, delivery: Delivery) -> None:
        """Set the entry's delivery count back to what it was before this reclaim."""
        try:
            await set_deliveries(
                self.redis,
                delivery.stream,
                WORKER_GROUP,
                self.worker.worker_id,
                delivery.entry_id,
                held_delivery_count(delivery.delivery_count),
            )
        except Exception as exc:  # Redis away too: the count stays one higher, no more
            log.warning("delivery_take_back_failed", entry_id=delivery.entry_id, error=repr(exc))

    async def _reconcile(self, delivery: Delivery) -> str:
        env = delivery.envelope
        run_id = run_id_of_stream(env.stream_id)
        if run_id is None:
            await self._ack(delivery)
            return "acked"
        state, now = await self.worker.db.in_tenant(
            env.project_id, lambda conn: leases.peek(conn, run_id)
        )
        seen = leases.availability(state, now, self.worker.worker_id)
        action = reclaim_action(seen, delivery.delivery_count, self.settings.max_deliveries)
        if action is ReclaimAction.DEAD_LETTER and not self.worker.routes.serves(
            env.project_id, state.contract_id if state is not None else None
        ):
            action = ReclaimAction.TAKE  # not this worker's: the claim rings its workers
        log.info(
            "reclaimed_entry",
            entry_id=delivery.entry_id,
            deliveries=delivery.delivery_count,
            seen=str(seen),
            action=str(action),
        )
        if action is ReclaimAction.ACK:
            await self._ack(delivery)
            return "acked"
        if action is ReclaimAction.LEAVE:
            # A live lease elsewhere holds the run: this delivery does not count (reclaim.py).
            await self._take_back(delivery)
            return "left"
        if action is ReclaimAction.DEAD_LETTER:
            await self._dead_letter(delivery, run_id)
            return "dead_lettered"
        entry = StreamEntry(delivery.stream, delivery.entry_id)
        if await self.worker.take(run_id, env.project_id, path="reclaim", entry=entry):
            await self._ack(delivery)
        return "taken"

    async def _dead_letter(self, delivery: Delivery, run_id: uuid.UUID) -> None:
        """Fail the run and record its dead letter in one transaction, then acknowledge; when
        someone else is on the run by now, the message is a redundant doorbell: acknowledged."""
        reason = dead_letter_reason(delivery.delivery_count, self.settings.max_deliveries)
        meta = trace_metadata()
        undelivered = leases.Undelivered(
            group=delivery.group,
            entry_id=delivery.entry_id,
            delivery_count=delivery.delivery_count,
            event_type=delivery.envelope.event_type,
            message=encode(delivery.envelope),
        )
        failed = await self.worker.db.in_tenant(
            delivery.envelope.project_id,
            lambda conn: leases.fail_undeliverable(
                conn,
                run_id,
                self.worker.worker_id,
                reason,
                DeliveryLimitError.code,
                meta,
                undelivered=undelivered,
            ),
        )
        if failed is not None:
            metrics.RUNS_FINISHED.labels("FAILED").inc()
            log.warning("run_failed_dead_letter", run_id=str(run_id), reason=reason)
        await self._ack(delivery)

    async def _ack(self, delivery: Delivery) -> None:
        await self.redis.xack(delivery.stream, WORKER_GROUP, delivery.entry_id)

    async def _leave_group(self) -> None:
        """After a clean stop: remove this consumer from the group when it owns no pending
        entries (consumer names are per process start; dead names would pile up)."""
        try:
            for stream in self.streams:
                pending = await self.redis.xpending_range(
                    stream, WORKER_GROUP, "-", "+", 1, consumername=self.worker.worker_id
                )
                if pending:
                    return
            for stream in self.streams:
                await self.redis.xgroup_delconsumer(stream, WORKER_GROUP, self.worker.worker_id)
        except Exception as exc:
            log.warning("leave_group_failed", error=repr(exc))
