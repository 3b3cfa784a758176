"""Consumer groups for workers and projectors (R-16, R-31, R-33, R-50).

:class:`GroupConsumer` reads new entries of its streams with XREADGROUP, runs the handler for
each with at most ``max_in_flight`` at once, and acknowledges (XACK, batched) when the handler
returns True; False or an exception leaves the entry pending for reclaim (duplicates are
normal: handlers must be idempotent). Each message runs in a span ``consume <event_type>``
that continues the producer's trace; a redelivery starts a new trace linked to it.

Losing Redis (R-33): each shard has an epoch key the relay writes after (re)creating the shard's
groups and republishing from Postgres. The consumer remembers the epoch it saw:
- NOGROUP (the group or the stream is gone): the group is created again, atomically with an
  epoch read, at 0 unless the epoch is unchanged and the consumer remembers its last id (the
  stream survived; then at that id). Never at ``$``. Repeated NOGROUPs back off exponentially
  and are logged at most once per 10 s per key: no hot loop.
- a changed epoch (seen on NOGROUP or by the periodic check) means the shard was rebuilt:
  acknowledgements for entries of the old stream are dropped, and ``on_reset(shard)`` is
  awaited so that the consumer can reconcile with Postgres (projectors compare stream versions).
- a missing epoch means Redis lost its data and the relay has not rebuilt the shard yet: the
  consumer keeps reading (its group, created at 0, receives what the relay republishes).

``run_until_idle`` is the burst mode for tests and tools: it drains what is there and returns.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from redis.exceptions import RedisError, ResponseError

from awooop.core.logs import get_logger
from streams import scripts
from streams.backoff import RateLimiter, retry_delay
from streams.deadletter import dead_letter_raw
from streams.delivery import Delivery, UndecodableEntry, text, to_delivery
from streams.keys import Keys, hash_tag
from streams.reclaim import autoclaim, touch
from streams.tracing import consume_span

__all__ = ["ConsumerStats", "Delivery", "GroupConsumer", "consume_span"]

log = get_logger(__name__)

Handler = Callable[[Delivery], Awaitable[bool]]
OnReset = Callable[[int], Awaitable[None]]
REDIS_ERRORS: tuple[type[BaseException], ...] = (RedisError,)  # redis-py wraps socket errors
LOG_INTERVAL_S = 10.0
ACK_LINGER_S = 0.02  # how long acknowledgements gather before one XACK (see _ack_loop)


def is_nogroup(exc: BaseException) -> bool:
    return isinstance(exc, ResponseError) and str(exc).startswith("NOGROUP")


@dataclass
class ConsumerStats:
    handled: int = 0  # handler calls
    acked: int = 0
    handler_errors: int = 0
    read_errors: int = 0
    nogroup: int = 0  # NOGROUP answers (each one recreated the group after a pause)
    resets: int = 0  # epoch changes seen
    dead_lettered: int = 0


class _Slots:
    """A counter of free handler slots that readers can wait on."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.used = 0
        self._changed = asyncio.Event()

    @property
    def free(self) -> int:
        return self.size - self.used

    async def wait_free(self) -> None:
        while self.used >= self.size:
            self._changed.clear()
            await self._changed.wait()

    async def acquire(self) -> None:
        await self.wait_free()
        self.used += 1

    def release(self) -> None:
        self.used -= 1
        self._changed.set()


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
    ) -> None:
        """``touch_interval_ms``: keep in-flight entries fresh (XCLAIM JUSTID) at that period.
        ``reclaim_idle_ms``: also take over other consumers' entries idle that long (and
        hand them to the handler with their delivery count)."""
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
        self.on_reset = on_reset
        self.touch_interval_ms = touch_interval_ms
        self.reclaim_idle_ms = reclaim_idle_ms
        self.epoch_check_ms = epoch_check_ms
        self.stats = ConsumerStats()
        self._read_sets = self._plan_reads(redis, self.streams)
        self._epochs: dict[str, str] = {}  # epoch key -> the value last seen
        self._last_ids: dict[str, str] = {}  # stream -> last entry id read in this epoch
        self._generation: defaultdict[str, int] = defaultdict(int)  # stream -> epoch changes
        self._acks: dict[str, list[str]] = {}
        self._ack_wakeup = asyncio.Event()
        self._in_flight: dict[asyncio.Task[None], Delivery] = {}
        self._slots = _Slots(max_in_flight)
        self._limiter = RateLimiter(LOG_INTERVAL_S)

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

    # --- groups and epochs -----------------------------------------------------------------

    async def ensure_groups(self) -> None:
        """Create the group on every stream where it is missing (see the module docstring)."""
        for stream in self.streams:
            await self._ensure(stream)

    async def _ensure(self, stream: str) -> None:
        epoch_key = self.keys.epoch_of(stream)
        known = self._epochs.get(epoch_key, "")
        last = self._last_ids.get(stream, "") if known else ""
        current, start, created = await scripts.ENSURE_GROUP(
            self.redis, [epoch_key, stream], [self.group, known, last]
        )
        await self._observe_epoch(epoch_key, text(current) or None)
        if int(created):
            log.info(
                "stream_group_created",
                stream=stream,
                group=self.group,
                start=text(start),
                epoch=text(current) or None,
            )

    async def check_epochs(self) -> None:
        """Read every epoch key of our streams and react to changes (normally periodic)."""
        epoch_keys = sorted({self.keys.epoch_of(s) for s in self.streams})
        pipe = self.redis.pipeline(transaction=False)
        for key in epoch_keys:
            pipe.get(key)
        values = await pipe.execute()
        for key, value in zip(epoch_keys, values, strict=True):
            await self._observe_epoch(key, text(value) if value is not None else None)

    async def _observe_epoch(self, epoch_key: str, value: str | None) -> None:
        if value is None:
            suppressed = self._limiter.allow("epoch-missing:" + epoch_key)
            if suppressed is not None:
                log.warning(
                    "stream_epoch_missing",
                    epoch_key=epoch_key,
                    group=self.group,
                    suppressed=suppressed,
                    hint="Redis lost its data; the relay rebuilds the shard from Postgres",
                )
            return
        known = self._epochs.get(epoch_key)
        self._epochs[epoch_key] = value
        if known is None or known == value:
            return
        self.stats.resets += 1
        affected = [s for s in self.streams if self.keys.epoch_of(s) == epoch_key]
        for stream in affected:
            self._generation[stream] += 1
            self._last_ids.pop(stream, None)
            self._acks.pop(stream, None)
        log.warning(
            "stream_reset_detected", epoch_key=epoch_key, group=self.group, old=known, new=value
        )
        if self.on_reset is not None and epoch_key != self.keys.notices_epoch():
            try:
                await self.on_reset(self.keys.stream_shard(affected[0]))
            except Exception:
                log.exception("stream_on_reset_failed", epoch_key=epoch_key, group=self.group)

    async def _recover_nogroup(self, streams: Sequence[str], exc: BaseException) -> None:
        self.stats.nogroup += 1
        suppressed = self._limiter.allow("nogroup:" + ",".join(streams))
        if suppressed is not None:
            log.warning(
                "stream_group_missing",
                streams=list(streams),
                group=self.group,
                error=str(exc),
                suppressed=suppressed,
            )
        for stream in streams:
            await self._ensure(stream)

    # --- reading and handling ----------------------------------------------------------------

    async def _read(self, streams: Sequence[str], count: int, block: int | None) -> list[Delivery]:
        response = await self.redis.xreadgroup(
            self.group, self.consumer, dict.fromkeys(streams, ">"), count=count, block=block
        )
        deliveries: list[Delivery] = []
        for stream_name, entries in response or []:
            stream = text(stream_name)
            for entry_id, fields in entries:
                self._last_ids[stream] = text(entry_id)
                try:
                    deliveries.append(to_delivery(stream, entry_id, fields, 1, self.group))
                except UndecodableEntry as bad:
                    await self._dead_letter_undecodable(bad, 1)
        # Entries of a generation whose epoch this consumer never saw (it started before the
        # relay wrote it): learn it now, or a wipe before the next periodic check would make
        # the rebuilt shard's epoch look like the first one (no reset seen). A failed read
        # here is left to the periodic check; the deliveries are handled either way.
        for epoch_key in sorted({self.keys.epoch_of(d.stream) for d in deliveries}):
            if epoch_key in self._epochs:
                continue
            try:
                value = await self.redis.get(epoch_key)
            except Exception as exc:  # not only RedisError: see _flush_acks
                self._log_error("stream_epoch_check_failed", exc)
                break
            await self._observe_epoch(epoch_key, text(value) if value is not None else None)
        return deliveries

    async def _dead_letter_undecodable(self, bad: UndecodableEntry, count: int) -> None:
        self.stats.dead_lettered += 1
        await dead_letter_raw(
            self.redis,
            self.keys,
            stream=bad.stream,
            group=self.group,
            entry_id=bad.entry_id,
            data=bad.data,
            reason=bad.reason,
            delivery_count=count,
        )

    async def _process(self, delivery: Delivery) -> bool:
        with consume_span(delivery) as span:
            try:
                ok = bool(await self.handler(delivery))
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
                        stream=delivery.stream,
                        entry_id=delivery.entry_id,
                        group=self.group,
                        suppressed=suppressed,
                    )
                ok = False
        self.stats.handled += 1
        return ok

    async def _run_one(self, delivery: Delivery) -> None:
        generation = self._generation[delivery.stream]
        if await self._process(delivery) and generation == self._generation[delivery.stream]:
            self._acks.setdefault(delivery.stream, []).append(delivery.entry_id)
            self._ack_wakeup.set()

    def _spawn(self, delivery: Delivery) -> None:
        task = asyncio.create_task(self._run_one(delivery))
        self._in_flight[task] = delivery
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._in_flight.pop(task, None)
        self._slots.release()

    async def _flush_acks(self) -> None:
        if not self._acks:
            return
        acks, self._acks = self._acks, {}
        try:
            pipe = self.redis.pipeline(transaction=False)
            for stream, ids in acks.items():
                pipe.xack(stream, self.group, *ids)
            await pipe.execute()
            self.stats.acked += sum(len(ids) for ids in acks.values())
        except Exception as exc:
            # The entries stay pending and come back through reclaim: duplicates, not loss.
            # Any exception, not only RedisError: redis-py 8.1 can leak AttributeError or
            # TypeError from a connection the server reset (redis/redis-py#4287; seen after a
            # cluster master restart), and a dead ack loop would leave every later entry pending.
            self._log_error("stream_ack_failed", exc)

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
            asyncio.create_task(self._ack_loop(halt_helpers)),
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
            await _finish(readers, grace_s=self.block_ms / 1000 + 5)
            if abandon:
                for task in list(self._in_flight):
                    task.cancel()
            if self._in_flight:
                await asyncio.wait(list(self._in_flight))
            await self._flush_acks()
            halt_helpers.set()
            self._ack_wakeup.set()
            await _finish(helpers, grace_s=5)

    async def _ensure_until_ok(self, stop: asyncio.Event) -> None:
        failures = 0
        while not stop.is_set():
            try:
                await self.ensure_groups()
                return
            except Exception as exc:  # not only RedisError: see _flush_acks
                failures += 1
                self._log_error("stream_ensure_groups_failed", exc)
                await _sleep_or_stop(retry_delay(failures), stop)

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
                        await self._recover_nogroup(streams, exc)
                    except Exception as again:
                        self._log_error("stream_group_recreate_failed", again)
                else:
                    self.stats.read_errors += 1
                    self._log_error("stream_read_failed", exc, streams=streams)
                await _sleep_or_stop(retry_delay(failures), halt)
                continue
            failures = 0
            for delivery in batch:
                await self._slots.acquire()
                self._spawn(delivery)
            if batch:
                # Let the new deliveries send their claims before the next XREADGROUP goes
                # out: a delivery's task runs to its first wait (the claim batcher schedules
                # its flush), the flush then sends the claim; the read can wait that long.
                await asyncio.sleep(0)
                await asyncio.sleep(0)

    async def _ack_loop(self, halt: asyncio.Event) -> None:
        while not halt.is_set():
            await self._ack_wakeup.wait()
            # Acks are not on anyone's way: let the next ones join this XACK. (An entry left
            # pending that much longer is at worst redelivered after a crash: a duplicate.)
            await _sleep_or_stop(ACK_LINGER_S, halt)
            self._ack_wakeup.clear()
            await self._flush_acks()

    async def _every(
        self, period_ms: int, action: Callable[[], Awaitable[None]], stop: asyncio.Event
    ) -> None:
        while not stop.is_set():
            await _sleep_or_stop(period_ms / 1000, stop)
            try:
                await action()
            except Exception as exc:
                self._log_error("stream_periodic_failed", exc, action=action.__name__)

    async def _touch_all(self) -> None:
        by_stream: dict[str, list[str]] = {}
        for delivery in list(self._in_flight.values()):
            by_stream.setdefault(delivery.stream, []).append(delivery.entry_id)
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
                    await self._recover_nogroup(streams, exc)
                    await asyncio.sleep(retry_delay(failures))
                    continue
                got += len(batch)
                await asyncio.gather(*(bounded(d) for d in batch))
            await self._flush_acks()
            handled += got
            now = time.monotonic()
            if got:
                quiet_since = now
                failures = 0
                continue
            if (now - quiet_since) * 1000 >= idle_ms:
                return handled
            await asyncio.sleep(min(0.01, idle_ms / 4000))


async def _finish(tasks: list[asyncio.Task[None]], grace_s: float) -> None:
    """Wait for tasks told to stop; cancel the ones still running after ``grace_s``."""
    if not tasks:
        return
    _, late = await asyncio.wait(tasks, timeout=grace_s)
    for task in late:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _sleep_or_stop(delay: float, stop: asyncio.Event) -> None:
    if delay <= 0:
        return
    with suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=delay)
