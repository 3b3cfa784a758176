"""The outbox relay: committed events and contract notices from Postgres into Redis Streams.

The event log is the outbox (R-30, R-31). The relay follows ``awooop_events`` with
:func:`awooop.eventlog.read_forward` from a cursor kept in ``awooop_relay_cursor``, and sends
each event to ``events_stream(shard)`` (every event, for projectors) and, when its type is in
``DISPATCH_EVENT_TYPES``, also to ``work_stream(shard)`` (for the ``workers`` group); the shard
is ``shard_of(project_id)``. Contract notices (``awooop_contract_outbox``, R-21, R-22) go to the
notices stream and are marked ``delivered_at``.

Guarantees and how they are kept:
- Nothing is skipped: ``read_forward`` only returns rows of transactions older than every
  running one, walking ``(tx_id, position)``; the cursor moves (in memory) after the XADDs
  succeeded. It is saved to ``awooop_relay_cursor`` at most every ``CURSOR_SAVE_INTERVAL_S``
  (and when a drain or a clean stop ends), not after every batch: at a steady trickle each
  commit is its own batch, and that UPDATE was a third of the relay's statements. A crash
  republishes what was published since the last save (at most that long): duplicates, never
  loss. Consumers must tolerate duplicates (the envelope's event_id and version identify
  them).
- Per-run order: each shard's part of a batch goes to Redis in ONE script call (all its XADDs,
  in log order), and a run's events all map to one shard. A failed call is retried whole, so
  the first copy of each event always arrives in version order; duplicates can only repeat an
  already delivered prefix.
- One active relay: several relay processes may run; the one holding a session advisory lock
  (on its dedicated connection, which also does all its reads and writes) publishes, the
  others retry the lock every poll interval. If the leader dies its session ends, the lock is
  free, and a standby takes over within one poll interval. The cursor save is also a
  compare-and-set on the previously saved position, so a leader that lost its session cannot
  move it.
- Wake-up: a statement-level trigger NOTIFYs ``awooop_relay`` on insert; the relay LISTENs on its
  connection and polls every ``AWOOOP_RELAY_POLL_INTERVAL_S`` as a fallback. A statement that
  wrote a dispatch event (``DISPATCH_EVENT_TYPES``: a worker waits for it) wakes the relay at
  once; one that wrote only other events (claims, steps, completions: for projectors) waits up
  to ``AWOOOP_RELAY_LINGER_S`` (default 5 ms, 0: at once), so that the events of a short run,
  or the next dispatch event's wake-up, share one read and one script call. When committed rows
  are held back by an older running transaction (anywhere in the cluster: ``read_forward``
  waits for the snapshot's xmin) it re-checks after 1 ms, doubling up to 50 ms. The read that
  returns a batch also says whether anything is held back: one statement per wake-up.
- Redis down: the publish raises, the attempt and failure are counted (metric and
  ``relay_attempts``/``relay_failures`` on the cursor row), and the loop backs off.

Trimming policy (script ``TRIM`` in :mod:`streams.scripts`), run every
``AWOOOP_RELAY_TRIM_INTERVAL_S``: a stream with consumer groups is trimmed with ``MINID ~`` below
the smallest id any group still needs (its oldest pending entry, which may yet be reclaimed, or
else its last-delivered id). Entries a group has not read or not acknowledged are never
trimmed; a group that stops consuming therefore holds its stream (watch
``awooop_consumer_group_lag``; XGROUP DESTROY a retired group). A stream without groups is
capped with ``MAXLEN ~ AWOOOP_STREAM_MAXLEN``; so are the notices (read with plain XREAD, no
groups) and the dead-letter streams. The floor entry also gives the shard's safe replay point
(below it every group had acknowledged everything), stored in ``awooop_relay_shards``.

Losing Redis (R-33) is handled in :mod:`streams.rebuild`.

Trace context: producers put ``traceparent``/``tracestate`` into the event metadata
(``awooop.telemetry.inject()`` inside their span); the relay copies them into the envelope, so
the consumer's span is a child of the producer's. Each batch has a ``relay publish`` span linked
to (up to 32 of) the producer spans.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import asyncpg

from awooop import eventlog, metrics
from awooop.config import Settings
from awooop.db import CONNECTION_ERRORS, PLATFORM_ROLE, Connection, connect
from awooop.errors import (
    DatabaseUnavailableError,
    RedisUnavailableError,
    StreamRebuildInterruptedError,
)
from awooop.eventlog import Cursor, RecordedEvent
from awooop.logs import get_logger
from awooop.loops import LoopContext
from awooop.telemetry import span_link, tracer
from streams import scripts
from streams.backoff import RateLimiter
from streams.consumer import REDIS_ERRORS
from streams.envelope import FIELD, decode_envelope
from streams.keys import WORKER_GROUP, Keys
from streams.notices import deliver_notices
from streams.publish import by_shard, publish_shard
from streams.rebuild import ShardRebuild, new_epoch
from streams.tracing import publish_spans

log = get_logger(__name__)

LOCK_KEY = 0x61776F6F6F7072  # "awooopr": one relay leader per database
NOTIFY_CHANNEL = "awooop_relay"
NOTICES_TABLE = "awooop_contract_outbox"
# Payloads of the events' NOTIFY (migration 0071): a statement that wrote a dispatch event, and
# one that wrote only other events (published after AWOOOP_RELAY_LINGER_S at most).
DISPATCH_PAYLOAD = "awooop_events:dispatch"
EVENTS_PAYLOAD = "awooop_events"
CURSOR_NAME = "events"
BATCH_BUDGET_S = 0.5  # an iteration publishes at most this long, then yields to the loop
# Held back by an older running transaction: re-check after 1 ms, doubling up to 4 ms for the
# first second (most holders are short worker transactions that write no event, so no NOTIFY
# announces their end), then up to 50 ms (a long transaction: do not spin on it).
MIN_RECHECK_S = 0.001
SHORT_HOLD_RECHECK_S = 0.004
SHORT_HOLD_S = 1.0
MAX_RECHECK_S = 0.05
MAX_LINKS = 32
# How stale the saved cursor may get while events flow: a crash republishes at most this much.
CURSOR_SAVE_INTERVAL_S = 0.25

FaultHook = Callable[[str], Awaitable[None]]
PG_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    *CONNECTION_ERRORS,
    asyncpg.PostgresConnectionError,
)
CLOSE_ERRORS: tuple[type[BaseException], ...] = (*PG_CONNECTION_ERRORS, asyncpg.PostgresError)

# --- SQL -----------------------------------------------------------------------------------

TRY_LOCK = "SELECT pg_try_advisory_lock($1)"
UNLOCK = "SELECT pg_advisory_unlock($1)"
LOAD_CURSOR = "SELECT tx_id, position FROM awooop_relay_cursor WHERE name = $1"
ADVANCE_CURSOR = """
UPDATE awooop_relay_cursor
SET tx_id = $4, position = $5, published = published + $6, relay_attempts = relay_attempts + $8,
    leader = $7, updated_at = now()
WHERE name = $1 AND tx_id = $2 AND position = $3
"""
COUNT_FAILURE = """
UPDATE awooop_relay_cursor
SET relay_attempts = relay_attempts + 1, relay_failures = relay_failures + 1,
    last_error = $2, updated_at = now()
WHERE name = $1
"""
# The oldest committed event not yet published (NULL: none). Also finds rows read_forward holds
# back because an older transaction is still running: then the relay re-checks soon.
STORE_SAFE_POINT = """
INSERT INTO awooop_relay_shards AS s (shard_count, shard, safe_tx_id, safe_position)
VALUES ($1, $2, $3, $4)
ON CONFLICT (shard_count, shard) DO UPDATE
    SET safe_tx_id = EXCLUDED.safe_tx_id, safe_position = EXCLUDED.safe_position,
        updated_at = now()
    WHERE s.safe_tx_id IS NULL
       OR (s.safe_tx_id, s.safe_position) < (EXCLUDED.safe_tx_id, EXCLUDED.safe_position)
"""

# --- helpers -------------------------------------------------------------------------------


def cursor_key(cursor: Cursor) -> tuple[int, int]:
    return (cursor.tx_id, cursor.position)


class LeadershipLost(Exception):
    """The cursor moved under us: another relay is active."""


class Relay:
    """One relay process's state; :meth:`step` is the body of the ``relay`` loop."""

    def __init__(
        self,
        *,
        settings: Settings,
        redis: Any,
        keys: Keys,
        relay_id: str | None = None,
        fault_hook: FaultHook | None = None,
    ) -> None:
        self.settings = settings
        self.redis = redis
        self.keys = keys
        self.relay_id = relay_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.fault_hook = fault_hook
        self.is_leader = False
        self.caught_up = False  # the last read found nothing committed left to publish
        self.published = 0  # events published by this process
        self.cursor = Cursor()  # published up to here
        self._saved = Cursor()  # awooop_relay_cursor holds this
        self._unsaved_events = 0
        self._unsaved_batches = 0
        self._save_due = 0.0
        self.epochs: dict[int, str] = {}  # shard -> epoch the relay publishes under
        self.groups: dict[str, set[str]] = {}  # stream -> groups seen there (for rebuilds)
        self._conn: Connection | None = None
        self._wakeup: asyncio.Event | None = None
        self._recheck: asyncio.TimerHandle | None = None
        self._linger: asyncio.TimerHandle | None = None
        self._recheck_delay = MIN_RECHECK_S
        self._held_since: float | None = None  # when the current hold-back began
        self._epochs_due = 0.0
        self._notices_due = 0.0
        self._trim_due = 0.0
        self._limiter = RateLimiter(30.0)

    # --- the loop body ---------------------------------------------------------------------

    async def step(self, ctx: LoopContext) -> None:
        self._wakeup = ctx.wakeup
        try:
            if not await self._lead():
                return
            more = await self.run_once()
        except LeadershipLost:
            log.warning("relay_leadership_lost", relay_id=self.relay_id)
            await self.close()
            return
        except REDIS_ERRORS as exc:
            raise RedisUnavailableError(f"Redis refused the relay: {exc}") from exc
        except PG_CONNECTION_ERRORS as exc:
            await self.close()
            raise DatabaseUnavailableError(f"relay lost its database connection: {exc}") from exc
        if more:
            ctx.wakeup.set()

    async def run_once(self) -> bool:
        """One leader iteration; True when more events are waiting right now."""
        now = time.monotonic()
        more = False
        failed: BaseException | None = None
        try:
            if now >= self._epochs_due:
                await self.check_epochs()
                self._epochs_due = now + self.settings.relay_poll_interval_s
            more = await self._drain_events(now + BATCH_BUDGET_S)
        except REDIS_ERRORS as exc:
            # One failed attempt to relay events, whichever Redis call refused.
            metrics.RELAY_ATTEMPTS.labels("events", "error").inc()
            await self.conn.execute(COUNT_FAILURE, CURSOR_NAME, f"{type(exc).__name__}: {exc}")
            failed = exc
        if time.monotonic() >= self._notices_due:
            # Due again after one poll interval, set BEFORE delivering: a NOTIFY that arrives
            # while we deliver resets it to 0 and must not be overwritten afterwards.
            self._notices_due = time.monotonic() + self.settings.relay_poll_interval_s
            try:
                # Also tried (and counted on the rows) when the events failed.
                await deliver_notices(
                    self.conn, self.redis, self.keys, self.settings, self.fault_hook
                )
            except REDIS_ERRORS as exc:
                self._notices_due = 0.0
                failed = failed or exc
        if failed is not None:
            raise failed
        if time.monotonic() >= self._trim_due:
            await self.trim()
            self._trim_due = time.monotonic() + self.settings.relay_trim_interval_s
        return more

    async def drain(self, timeout_s: float = 60.0) -> int:
        """Publish until nothing committed is left unpublished (tests, benchmarks, tools);
        returns the number of events published. Needs the leadership."""
        if not await self._lead():
            raise RuntimeError("another relay holds the relay lock")
        start = self.published
        deadline = time.monotonic() + timeout_s
        while True:
            self._epochs_due = self._notices_due = 0.0
            more = await self.run_once()
            if not more and self.caught_up:
                await self.save_cursor()
                return self.published - start
            if time.monotonic() > deadline:
                raise TimeoutError(f"relay not caught up after {timeout_s} s")
            if not more:
                await asyncio.sleep(0.005)

    # --- leadership ----------------------------------------------------------------------------

    @property
    def conn(self) -> Connection:
        if self._conn is None:
            raise RuntimeError("relay is not connected")
        return self._conn

    async def _lead(self) -> bool:
        if self._conn is None or self._conn.is_closed():
            await self.close()
            self._conn = await connect(self.settings.database_url, PLATFORM_ROLE, cached_plans=True)
            # A cursor update lost in a Postgres crash only republishes (duplicates): no need
            # to wait for its WAL flush on every batch.
            await self._conn.execute("SET synchronous_commit TO off")
        if self.is_leader:
            return True
        if not await self.conn.fetchval(TRY_LOCK, LOCK_KEY):
            if self._limiter.allow("standby") is not None:
                log.info("relay_standby", relay_id=self.relay_id)
            return False
        row = await self.conn.fetchrow(LOAD_CURSOR, CURSOR_NAME)
        if row is None:
            raise RuntimeError("awooop_relay_cursor has no 'events' row: run awooop migrate")
        self.cursor = self._saved = Cursor(row["tx_id"], row["position"])
        self._unsaved_events = self._unsaved_batches = 0
        await self.conn.add_listener(NOTIFY_CHANNEL, self._on_notify)
        self.is_leader = True
        self.epochs.clear()
        self._epochs_due = self._notices_due = self._trim_due = 0.0
        log.info(
            "relay_leader",
            relay_id=self.relay_id,
            tx_id=self.cursor.tx_id,
            position=self.cursor.position,
        )
        return True

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: object) -> None:
        if payload == NOTICES_TABLE:
            self._notices_due = 0.0
        if self._wakeup is None:
            return
        linger = self.settings.relay_linger_s
        if payload != EVENTS_PAYLOAD or linger <= 0:
            self._wakeup.set()
        elif self._linger is None and not self._wakeup.is_set():
            # Only events no worker waits for: let the next ones of the run join them.
            self._linger = asyncio.get_running_loop().call_later(linger, self._end_linger)

    def _end_linger(self) -> None:
        self._linger = None
        if self._wakeup is not None:
            self._wakeup.set()

    async def close(self) -> None:
        """Give up leadership and the connection (a standby takes over)."""
        for timer in (self._recheck, self._linger):
            if timer is not None:
                timer.cancel()
        self._recheck = self._linger = None
        conn, self._conn = self._conn, None
        was_leader, self.is_leader = self.is_leader, False
        if conn is None or conn.is_closed():
            return
        try:
            if was_leader:
                with contextlib.suppress(LeadershipLost):
                    await self._save(conn)
                await conn.remove_listener(NOTIFY_CHANNEL, self._on_notify)
                await conn.fetchval(UNLOCK, LOCK_KEY)
            await conn.close(timeout=5)
        except CLOSE_ERRORS:
            conn.terminate()

    # --- events ----------------------------------------------------------------------------

    async def _drain_events(self, deadline: float) -> bool:
        """Publish batches until caught up or past ``deadline`` (True: more waiting).

        Batches are pipelined: while batch N goes to Redis, batch N+1 is read from Postgres
        (the read does not depend on the publish; the cursor still moves only after batch N's
        XADDs succeeded). A publish that needs a shard rebuild (which uses the Postgres
        connection) waits for the read to finish.
        """
        size = self.settings.relay_batch_size
        if self._linger is not None:  # this read takes what the lingering notice announced
            self._linger.cancel()
            self._linger = None
        held: float | None
        batch, held = await eventlog.read_forward_and_held(self.conn, self.cursor, size)
        known = True  # whether ``held`` describes what follows the last batch read
        while batch:
            spans = publish_spans(batch, self.keys)
            grouped = by_shard(batch, self.keys, contexts=spans.contexts)
            upcoming: list[RecordedEvent] = []
            try:
                if len(batch) < size:  # caught up: nothing to read meanwhile (no task to start)
                    left = await self._publish_batch(batch, grouped, False)
                else:  # a backlog: the plain read, probed once at its end
                    publishing = asyncio.create_task(self._publish_batch(batch, grouped, False))
                    try:
                        upcoming = await eventlog.read_forward(
                            self.conn, eventlog.advance(self.cursor, batch), size
                        )
                        known = False
                    finally:
                        left = await publishing
                if left:
                    await self._publish_batch(batch, left, True)
            except BaseException as exc:
                spans.end(exc)
                raise
            spans.end()
            if self.fault_hook is not None:
                await self.fault_hook("published")
            self._advance(batch)
            if time.monotonic() >= deadline and upcoming:
                self.caught_up = False
                metrics.OUTBOX_LAG.labels("events").set(
                    max(0.0, time.time() - upcoming[0].recorded_at.timestamp())
                )
                await self._save_if_due()
                return True
            batch = upcoming
        # Caught up with what the last read could see; ``held``: the age of a committed event
        # it could not take yet (an older transaction still runs), which no NOTIFY announces.
        if not known:
            held = await eventlog.held_back(self.conn, self.cursor)
        metrics.OUTBOX_LAG.labels("events").set(held or 0.0)
        self.caught_up = held is None
        if held is None:
            self._recheck_delay = MIN_RECHECK_S
            self._held_since = None
        else:
            self._schedule_recheck()
        await self._save_if_due()
        return False

    async def _publish_batch(
        self,
        batch: Sequence[RecordedEvent],
        grouped: dict[int, list[tuple[str, bytes]]],
        may_rebuild: bool,
    ) -> dict[int, list[tuple[str, bytes]]]:
        links = [
            link
            for event in batch[:MAX_LINKS]
            for link in span_link(
                event.metadata.get("traceparent"), event.metadata.get("tracestate")
            )
        ]
        with tracer.start_as_current_span(
            "relay publish", links=links, attributes={"awooop.events": len(batch)}
        ):
            return await self.publish(grouped, may_rebuild=may_rebuild)

    async def publish(
        self, grouped: dict[int, list[tuple[str, bytes]]], *, may_rebuild: bool = True
    ) -> dict[int, list[tuple[str, bytes]]]:
        """XADD each shard's entries under the shard's epoch, rebuilding lost shards first.

        With ``may_rebuild=False`` (while the Postgres connection is busy) shards that need a
        rebuild are left out and returned; otherwise everything is published or it raises.
        """
        remaining = dict(grouped)
        for _ in range(3):
            if may_rebuild:
                for shard in sorted(remaining):
                    if shard not in self.epochs:
                        await self.rebuild(shard)
            ready = sorted(shard for shard in remaining if shard in self.epochs)
            if not ready:
                break
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

    def _advance(self, batch: Sequence[RecordedEvent]) -> None:
        """The batch is in Redis: move the cursor (saved later, see the module docstring)."""
        self.cursor = eventlog.advance(self.cursor, batch)
        self.published += len(batch)
        self._unsaved_events += len(batch)
        self._unsaved_batches += 1
        metrics.RELAY_ATTEMPTS.labels("events", "ok").inc()
        metrics.RELAY_PUBLISHED.labels("events").inc(len(batch))

    async def _save_if_due(self) -> None:
        now = time.monotonic()
        if self._unsaved_batches and now >= self._save_due:
            self._save_due = now + CURSOR_SAVE_INTERVAL_S
            await self._save(self.conn)

    async def save_cursor(self) -> None:
        """Save the published position now (the end of a drain, a clean stop)."""
        await self._save(self.conn)

    async def _save(self, conn: Connection) -> None:
        """Compare-and-set the saved cursor; LeadershipLost when another relay moved it."""
        if not self._unsaved_batches:
            return
        new = self.cursor
        status = await conn.execute(
            ADVANCE_CURSOR,
            CURSOR_NAME,
            self._saved.tx_id,
            self._saved.position,
            new.tx_id,
            new.position,
            self._unsaved_events,
            self.relay_id,
            self._unsaved_batches,
        )
        if status != "UPDATE 1":
            raise LeadershipLost(status)
        self._saved = new
        self._unsaved_events = self._unsaved_batches = 0

    def _schedule_recheck(self) -> None:
        if self._recheck is not None:
            return
        now = time.monotonic()
        if self._held_since is None:
            self._held_since = now
        cap = SHORT_HOLD_RECHECK_S if now - self._held_since < SHORT_HOLD_S else MAX_RECHECK_S
        delay = min(self._recheck_delay, cap)
        self._recheck_delay = min(delay * 2, cap, self.settings.relay_poll_interval_s)
        self._recheck = asyncio.get_running_loop().call_later(delay, self._fire_recheck)

    def _fire_recheck(self) -> None:
        self._recheck = None
        if self._wakeup is not None:
            self._wakeup.set()

    # --- epochs and rebuilds -------------------------------------------------------------------

    async def check_epochs(self) -> None:
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
                await self.rebuild(shard)
            else:
                self.epochs[shard] = value.decode()

    async def rebuild(self, shard: int) -> None:
        epoch = await ShardRebuild(
            conn=self.conn,
            redis=self.redis,
            keys=self.keys,
            shard=shard,
            upto=self.cursor,
            batch_size=self.settings.relay_batch_size,
            groups={
                self.keys.work_stream(shard): {WORKER_GROUP}
                | self.groups.get(self.keys.work_stream(shard), set()),
                self.keys.events_stream(shard): self.groups.get(
                    self.keys.events_stream(shard), set()
                ),
            },
        ).run()
        self.epochs[shard] = epoch

    # --- trimming and the safe replay point --------------------------------------------------

    async def trim(self) -> None:
        for shard in self.keys.shards():
            if shard not in self.epochs:
                continue  # lost: the next iteration rebuilds it; its group list is kept until then
            floors: list[Cursor] = []
            for stream in (self.keys.events_stream(shard), self.keys.work_stream(shard)):
                floor = await self._trim_stream(stream)
                if floor is not None:
                    floors.append(floor)
            if floors:
                safe = min(floors, key=cursor_key)
                await self.conn.execute(
                    STORE_SAFE_POINT, self.keys.shard_count, shard, safe.tx_id, safe.position
                )

    async def _trim_stream(self, stream: str) -> Cursor | None:
        """Trim one stream; return the safe replay point its groups allow (None: no bound)."""
        trimmed, _floor, data, drained, stats = await scripts.TRIM(
            self.redis, [stream], [str(self.settings.stream_maxlen), FIELD]
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
        self.groups[stream] = names
        if not names:
            return None
        if int(drained):
            # Every group acknowledged the last entry: all this relay published to the stream
            # (everything up to its cursor; publishing and trimming take turns) is done.
            return self.cursor
        if not data:
            return None
        envelope = decode_envelope(data)
        # Everything before the floor entry was acknowledged by every group (exclusive bound).
        return Cursor(envelope.tx_id, envelope.position - 1)
