"""Consumer groups for workers and projectors (R-16, R-31, R-33, R-50).

:class:`GroupConsumer` reads new entries of its streams with XREADGROUP, runs the handler for
each with at most ``max_in_flight`` at once, and acknowledges (XACK, batched) when the handler
returns True; False or an exception leaves the entry pending for reclaim (duplicates are
normal: handlers must be idempotent). Each message runs in a span ``consume <event_type>``
that continues the producer's trace; a redelivery starts a new trace linked to it (unless the
handler traces batches of its own: ``span_each=False``).

Losing Redis (R-33): groups recreated on NOGROUP, the shard epochs and what a changed one
means are in :mod:`awooop.streams.consumer_groups`; acknowledgements in
:mod:`awooop.streams.consumer_acks`.

``run_until_idle`` is the burst mode for tests and tools: it drains what is there and returns.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import nullcontext
from typing import Any

from opentelemetry import trace
from redis.exceptions import RedisError, ResponseError

from awooop.core.db import Database
from awooop.core.logs import get_logger
from awooop.streams.backoff import RateLimiter, retry_delay
from awooop.streams.consumer_acks import Acks
from awooop.streams.consumer_groups import GroupEpochs, OnReset, is_nogroup
from awooop.streams.consumer_stats import ConsumerStats
from awooop.streams.consumer_tasks import Slots, finish, sleep_or_stop
from awooop.streams.deadletter import dead_letter_undecodable
from awooop.streams.delivery import Delivery, UndecodableEntry, text, to_delivery
from awooop.streams.keys import Keys, hash_tag
from awooop.streams.reclaim import autoclaim, touch
from awooop.streams.tracing import consume_span

log = get_logger(__name__)

Handler = Callable[[Delivery], Awaitable[bool]]
REDIS_ERRORS: tuple[type[BaseException], ...] = (RedisError,)  # redis-py wraps socket errors
LOG_INTERVAL_S = 10.0


class GroupConsumer:
    def __init__(
        self,
        redis: Any,
        *,
        group: str,
        consumer: str,
        streams: list[str],
        handler: Handler,
        max_in_flight: int = 16,
        block_ms: int = 1000,
        keys: Keys,
        on_reset: OnReset | None = None,
        touch_interval_ms: int | None = None,
        reclaim_idle_ms: int | None = None,
        epoch_check_ms: int = 1000,
        db: Database | None = None,
        span_each: bool = True,
    ) -> None:
        """``touch_interval_ms``: keep in-flight entries fresh (XCLAIM JUSTID) at that period.
        ``reclaim_idle_ms``: also take over other consumers' entries idle that long (and
        hand them to the handler with their delivery count). ``db``: where entries that
        cannot be decoded are recorded as dead letters (without it they stay pending).
        ``span_each``: a ``consume`` span per message; False when the handler traces batches
        of its own (the projectors: one span per batch, not one per event)."""
        if not streams:
            raise ValueError("a GroupConsumer needs at least one stream")
        if max_in_flight < 1 or block_ms < 1:
            raise ValueError("max_in_flight and block_ms must be positive")
        self.redis = redis
        self.group = group
        self.consumer = consumer
        self.streams = list(streams)
        self.handler = handler
        self.max_in_flight = max_in_flight
        self.block_ms = block_ms
        self.keys = keys
        self.db = db
        self.touch_interval_ms = touch_interval_ms
        self.reclaim_idle_ms = reclaim_idle_ms
        self.epoch_check_ms = epoch_check_ms
        self.span_each = span_each
        self.stats = ConsumerStats()
        self._read_sets = self._plan_reads(redis, self.streams)
        self._in_flight: dict[asyncio.Task[None], tuple[str, str]] = {}  # (stream, entry id)
        self._slots = Slots(max_in_flight)
        self._limiter = RateLimiter(LOG_INTERVAL_S)
        self._acks = Acks(redis, group, self.stats, self._log_error)
        self._groups = GroupEpochs(
            redis,
            group=group,
            streams=self.streams,
            keys=keys,
            on_reset=on_reset,
            stats=self.stats,
            acks=self._acks,
            limiter=self._limiter,
            log_error=self._log_error,
        )

    @staticmethod
    def _plan_reads(redis: Any, streams: Sequence[str]) -> list[list[str]]:
        """One XREADGROUP for all streams; on Redis Cluster one per hash tag (slot)."""
        from redis.asyncio.cluster import RedisCluster

        if not isinstance(redis, RedisCluster):
            return [list(streams)]
        by_tag: dict[str, list[str]] = {}
        for stream in streams:
            by_tag.setdefault(hash_tag(stream), []).append(stream)
        return list(by_tag.values())

    @property
    def on_reset(self) -> OnReset | None:
        """Awaited with the shard when its epoch changed (may be set after construction)."""
        return self._groups.on_reset

    @on_reset.setter
    def on_reset(self, hook: OnReset | None) -> None:
        self._groups.on_reset = hook

    # --- groups and epochs (awooop.streams.consumer_groups) --------------------------------------

    async def ensure_groups(self) -> None:
        """Create the group on every stream where it is missing."""
        await self._groups.ensure_groups()

    async def check_epochs(self) -> None:
        """Read every epoch key of our streams and react to changes (normally periodic)."""
        await self._groups.check_epochs()

    # --- reading and handling ----------------------------------------------------------------

    async def _read(self, streams: Sequence[str], count: int, block: int | None) -> list[Delivery]:
        response = await self.redis.xreadgroup(
            self.group, self.consumer, dict.fromkeys(streams, ">"), count=count, block=block
        )
        deliveries: list[Delivery] = []
        for stream_name, entries in response or []:
            stream = text(stream_name)
            for entry_id, fields in entries:
                self._groups.read(stream, text(entry_id))
                try:
                    deliveries.append(to_delivery(stream, entry_id, fields, 1, self.group))
                except UndecodableEntry as bad:
                    await self._dead_letter_undecodable(bad, 1)
        await self._groups.learn_epochs(deliveries)
        return deliveries

    async def _dead_letter_undecodable(self, bad: UndecodableEntry, count: int) -> None:
        if await dead_letter_undecodable(
            self.db,
            self.redis,
            self.keys,
            stream=bad.stream,
            group=self.group,
            entry_id=bad.entry_id,
            data=bad.data,
            reason=bad.reason,
            delivery_count=count,
        ):
            self.stats.dead_lettered += 1

    async def _run_one(self, delivery: Delivery) -> None:
        """The handler for one entry, inside its span; acknowledged when it returns True and
        its stream was not rebuilt meanwhile."""
        stream, entry_id = delivery.stream, delivery.entry_id
        generation = self._groups.generation[stream]
        spanned = consume_span(delivery) if self.span_each else nullcontext(trace.INVALID_SPAN)
        with spanned as span:
            try:
                work = self.handler(delivery)
                # Not kept while the handler runs: one that runs long (a worker's run) holds
                # only what it took from the delivery, not its envelope.
                del delivery
                ok = bool(await work)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.stats.handler_errors += 1
                span.record_exception(exc)
                span.set_status(trace.StatusCode.ERROR)
                suppressed = self._limiter.allow("handler:" + type(exc).__name__)
                if suppressed is not None:
                    log.exception(
                        "stream_handler_failed",
                        stream=stream,
                        entry_id=entry_id,
                        group=self.group,
                        suppressed=suppressed,
                    )
                ok = False
        self.stats.handled += 1
        if ok and generation == self._groups.generation[stream]:
            self._acks.add(stream, entry_id)

    def _spawn(self, delivery: Delivery) -> None:
        task = asyncio.create_task(self._run_one(delivery))
        self._in_flight[task] = (delivery.stream, delivery.entry_id)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._in_flight.pop(task, None)
        self._slots.release()

    def _log_error(self, event: str, exc: BaseException, **fields: Any) -> None:
        suppressed = self._limiter.allow(event)
        if suppressed is not None:
            log.warning(
                event,
                group=self.group,
                error=f"{type(exc).__name__}: {exc}",
                suppressed=suppressed,
                **fields,
            )

    # --- run forever -----------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set, then let in-flight handlers finish and flush acks.

        Cancelling ``run`` instead abandons in-flight handlers (their entries stay pending).
        Helpers and readers are stopped by events, not only by cancellation: redis-py can
        absorb a cancellation that lands inside a pipeline call.
        """
        await self._ensure_until_ok(stop)
        halt_readers, halt_helpers = asyncio.Event(), asyncio.Event()
        helpers = [
            asyncio.create_task(self._acks.loop(halt_helpers)),
            asyncio.create_task(self._every(self.epoch_check_ms, self.check_epochs, halt_helpers)),
        ]
        if self.touch_interval_ms:
            helpers.append(
                asyncio.create_task(
                    self._every(self.touch_interval_ms, self._touch_all, halt_helpers)
                )
            )
        if self.reclaim_idle_ms:
            period = max(100, self.reclaim_idle_ms // 2)
            helpers.append(
                asyncio.create_task(self._every(period, self._reclaim_all, halt_helpers))
            )
        readers = [
            asyncio.create_task(self._reader(streams, stop, halt_readers))
            for streams in self._read_sets
        ]
        abandon = False
        try:
            await stop.wait()
        except asyncio.CancelledError:
            abandon = True
            raise
        finally:
            halt_readers.set()
            await finish(readers, grace_s=self.block_ms / 1000 + 5)
            if abandon:
                for task in list(self._in_flight):
                    task.cancel()
            if self._in_flight:
                await asyncio.wait(list(self._in_flight))
            await self._acks.flush()
            halt_helpers.set()
            self._acks.wake()
            await finish(helpers, grace_s=5)

    async def _ensure_until_ok(self, stop: asyncio.Event) -> None:
        failures = 0
        while not stop.is_set():
            try:
                await self.ensure_groups()
                return
            except Exception as exc:  # not only RedisError: see Acks.flush
                failures += 1
                self._log_error("stream_ensure_groups_failed", exc)
                await sleep_or_stop(retry_delay(failures), stop)

    async def _reader(self, streams: list[str], stop: asyncio.Event, halt: asyncio.Event) -> None:
        failures = 0
        while not (stop.is_set() or halt.is_set()):
            await self._slots.wait_free()
            if halt.is_set():
                return
            try:
                batch = await self._read(streams, self._slots.free, self.block_ms)
            except Exception as exc:
                failures += 1
                if is_nogroup(exc):
                    try:
                        await self._groups.recover_nogroup(streams, exc)
                    except Exception as again:
                        self._log_error("stream_group_recreate_failed", again)
                else:
                    self.stats.read_errors += 1
                    self._log_error("stream_read_failed", exc, streams=streams)
                await sleep_or_stop(retry_delay(failures), halt)
                continue
            failures = 0
            spawned = len(batch)
            batch.reverse()
            while batch:  # each delivery let go of once spawned (its task holds what it needs)
                await self._slots.acquire()
                self._spawn(batch.pop())
            if spawned:
                # Let the new deliveries send their claims before the next XREADGROUP goes
                # out: a delivery's task runs to its first wait (the claim batcher schedules
                # its flush), the flush then sends the claim; the read can wait that long.
                await asyncio.sleep(0)
                await asyncio.sleep(0)

    async def _every(
        self, period_ms: int, action: Callable[[], Awaitable[None]], stop: asyncio.Event
    ) -> None:
        while not stop.is_set():
            await sleep_or_stop(period_ms / 1000, stop)
            try:
                await action()
            except Exception as exc:
                self._log_error("stream_periodic_failed", exc, action=action.__name__)

    async def _touch_all(self) -> None:
        by_stream: dict[str, list[str]] = {}
        for stream, entry_id in list(self._in_flight.values()):
            by_stream.setdefault(stream, []).append(entry_id)
        for stream, ids in by_stream.items():
            await touch(self.redis, stream, self.group, self.consumer, ids)

    async def _reclaim_all(self) -> None:
        assert self.reclaim_idle_ms is not None
        for stream in self.streams:
            if self._slots.free <= 0:
                return
            claimed = await autoclaim(
                self.redis,
                stream,
                self.group,
                self.consumer,
                self.reclaim_idle_ms,
                self._slots.free,
                keys=self.keys,
                db=self.db,
            )
            for delivery in claimed:
                await self._slots.acquire()
                self._spawn(delivery)

    # --- burst mode --------------------------------------------------------------------------

    async def run_until_idle(self, idle_ms: int = 200) -> int:
        """Handle entries until none arrived for ``idle_ms``; return how many were handled."""
        await self.ensure_groups()
        handled = 0
        failures = 0
        quiet_since = time.monotonic()
        semaphore = asyncio.Semaphore(self.max_in_flight)

        async def bounded(delivery: Delivery) -> None:
            async with semaphore:
                await self._run_one(delivery)

        while True:
            got = 0
            for streams in self._read_sets:
                try:
                    batch = await self._read(streams, self.max_in_flight, None)
                except ResponseError as exc:
                    if not is_nogroup(exc) or failures > 20:
                        raise
                    failures += 1
                    await self._groups.recover_nogroup(streams, exc)
                    await asyncio.sleep(retry_delay(failures))
                    continue
                got += len(batch)
                await asyncio.gather(*(bounded(d) for d in batch))
            await self._acks.flush()
            handled += got
            now = time.monotonic()
            if got:
                quiet_since = now
                failures = 0
                continue
            if (now - quiet_since) * 1000 >= idle_ms:
                return handled
            await asyncio.sleep(min(0.01, idle_ms / 4000))
