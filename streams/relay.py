"""The outbox relay: committed events and contract notices from Postgres into Redis Streams.

The event log is the outbox (R-30, R-31). The relay follows ``awooop_events`` with
:func:`awooop.log.eventlog.read_forward` from a cursor kept in ``awooop_relay_cursor``, and sends
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
- One active relay: several relay processes may run; the one holding the ``relay`` lease
  (:class:`awooop.core.leadership.Lease`, row ``awooop_leaders.relay``) publishes, the others try
  to acquire it every poll interval. A leader that stops cleanly releases it (a standby leads
  within one poll interval); one that dies or is frozen (SIGSTOP, a paused VM) stops renewing,
  and a standby leads within ``AWOOOP_RELAY_LEADER_LEASE_S`` + ``AWOOOP_RELAY_POLL_INTERVAL_S``
  (9 s by default). A session advisory lock could not do this: a frozen process keeps its
  session and its lock forever.
- Fencing: the cursor save is a compare-and-set on the previously saved position AND checks in
  the same statement that this relay's term still holds an unexpired lease, so a relay that
  lost leadership (a resumed frozen one, one cut off from Postgres) cannot move the cursor,
  let alone backwards; it gets :class:`LeadershipLostError` and steps down. Before each publish
  to Redis (events, notices, a rebuild) the leader checks its local lease deadline
  (:meth:`Lease.check`): a process resumed after its lease ran out steps down at that check,
  before publishing. The one thing no check can stop: a process frozen between that check and
  its XADD sends that one batch after resuming. That is harmless: its cursor started at or after
  the saved one the new leader started from, and each relay publishes a shard's events in log
  order, so every event's FIRST copy in a stream still arrives in log order (the earlier of two
  copies, each sent in order, is in order) and nothing is skipped (the new leader publishes
  everything after the saved cursor itself). The late batch can only add duplicates, which
  consumers already tolerate (at-least-once, R-31). Nothing the relay writes in Postgres as
  leader outlives its lease: its connection has ``statement_timeout``, ``lock_timeout`` and
  ``idle_in_transaction_session_timeout`` at the lease (it holds no transaction open anyway).
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
(``awooop.core.telemetry.inject()`` inside their span); the relay copies them into the envelope, so
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

from awooop.core import metrics
from awooop.core.config import Settings
from awooop.core.db import Connection
from awooop.core.errors import (
    DatabaseUnavailableError,
    LeadershipLostError,
    RedisUnavailableError,
    StreamRebuildInterruptedError,
)
from awooop.core.leadership import Lease, timeout_ms
from awooop.core.logs import get_logger
from awooop.core.pools import PLATFORM_ROLE, connect
from awooop.core.retries import CONNECTION_ERRORS
from awooop.core.telemetry import span_link, tracer
from awooop.log import eventlog
from awooop.log.eventlog import Cursor, RecordedEvent
from awooop.loops.framework import LoopContext
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

LEADERSHIP = "relay"  # the awooop_leaders row: one relay leader per database
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

# The leader's working connection: no statement, lock wait or open transaction outlives the
# lease; a cursor update lost in a Postgres crash only republishes (duplicates), so no need to
# wait for its WAL flush on every batch.
SESSION_SETTINGS = """
SELECT set_config('statement_timeout', $1, false), set_config('lock_timeout', $1, false),
       set_config('idle_in_transaction_session_timeout', $1, false),
       set_config('synchronous_commit', 'off', false)
"""
LOAD_CURSOR = "SELECT tx_id, position FROM awooop_relay_cursor WHERE name = $1"
# Compare-and-set on the saved position, fenced by the leader's term (awooop/core/leadership.py):
# a relay whose lease ran out or was taken moves nothing.
ADVANCE_CURSOR = """
UPDATE awooop_relay_cursor
SET tx_id = $4, position = $5, published = published + $6, relay_attempts = relay_attempts + $8,
    leader = $7, updated_at = now()
WHERE name = $1 AND tx_id = $2 AND position = $3
  AND EXISTS (
    SELECT 1 FROM awooop_leaders
    WHERE name = $9 AND holder = $7 AND term = $10 AND lease_until > now()
    FOR SHARE
  )
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
        self.lease = Lease(
            database_url=settings.database_url,
            name=LEADERSHIP,
            holder=self.relay_id,
            lease_s=settings.relay_leader_lease_s,
            renew_s=settings.relay_leader_renew_s,
            on_lost=self._on_lease_lost,
            fault_hook=fault_hook,
        )

    # --- the loop body ---------------------------------------------------------------------

    async def step(self, ctx: LoopContext) -> None:
        self._wakeup = ctx.wakeup
        try:
            if not await self._lead():
                return
            more = await self.run_once()
        except LeadershipLostError as exc:
            log.warning(
                "relay_leadership_lost",
                relay_id=self.relay_id,
                term=self.lease.term,
                reason=exc.message,
            )
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
                self.lease.check()
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
            raise RuntimeError("another relay holds the relay lease")
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
        if self.is_leader:
            self.lease.check()
            return True
        if not await self.lease.acquire():
            if self._limiter.allow("standby") is not None:
                log.info("relay_standby", relay_id=self.relay_id)
            return False
        try:
            await self._take_over()
        except BaseException:
            await self.close()  # gives the lease back: another relay may do better
            raise
        return True

    async def _take_over(self) -> None:
        """Just acquired the lease (a new term): load the saved cursor and start leading."""
        if self._conn is None or self._conn.is_closed():
            self._conn = await connect(self.settings.database_url, PLATFORM_ROLE, cached_plans=True)
            await self._conn.execute(
                SESSION_SETTINGS, timeout_ms(self.settings.relay_leader_lease_s)
            )
        # Read after the acquisition committed: an earlier leader's fenced save either
        # finished before it (and is seen here) or is refused.
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
            term=self.lease.term,
            tx_id=self.cursor.tx_id,
            position=self.cursor.position,
        )

    def _on_lease_lost(self) -> None:
        """The renewal found the lease gone: wake the loop so that it steps down now."""
        if self._wakeup is not None:
            self._wakeup.set()

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
        try:
            if conn is None or conn.is_closed():
                return
            try:
                if was_leader:
                    with contextlib.suppress(LeadershipLostError):
                        await self._save(conn)  # fenced: refused when the lease is gone
                    await conn.remove_listener(NOTIFY_CHANNEL, self._on_notify)
                await conn.close(timeout=5)
            except CLOSE_ERRORS:
                conn.terminate()
        finally:
            await self.lease.close()

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
            "relay publish", links=links, attributes={"awooop.core.events": len(batch)}
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
        """Compare-and-set the saved cursor, fenced by the lease term; LeadershipLostError when
        another relay moved it or this relay's term no longer holds the lease."""
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
            LEADERSHIP,
            self.lease.term,
        )
        if status != "UPDATE 1":
            raise LeadershipLostError(
                "the relay cursor save was refused: another relay moved the cursor or holds "
                "the lease",
                term=self.lease.term,
            )
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
        self.lease.check()
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
                self.lease.check()
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
