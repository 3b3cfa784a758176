"""The outbox relay: committed events and contract notices from Postgres into Redis Streams.

The event log is the outbox (R-30, R-31). The relay follows ``awooop_events`` with
:func:`awooop.eventlog.eventlog.read_forward` from a cursor kept in ``awooop_relay_cursor``, and
sends each event to ``events_stream(shard)`` (every event, for projectors) and, when its type is in
``DISPATCH_EVENT_TYPES``, also to ``work_stream(shard)`` (for the ``workers`` group); the shard
is ``shard_of(project_id)``. Contract notices (``awooop_contract_outbox``, R-21, R-22) go to the
notices stream and are marked ``delivered_at``.

Guarantees and how they are kept:
- Nothing is skipped: ``read_forward`` only returns rows of transactions older than every
  running one, walking ``(tx_id, position)``; the cursor moves after the XADDs succeeded, and
  is saved (fenced) now and then (:mod:`awooop.streams.relay_cursor`): a crash republishes what
  was published since the last save: duplicates, never loss (event_id and version name them).
  Committed rows that an older running transaction holds back are published ahead of the
  cursor, in per-stream order (:mod:`awooop.streams.relay_ahead`); the cursor skips them later.
- Per-run order: each shard's part of a batch goes to Redis in ONE script call, in log order
  (:mod:`awooop.streams.relay_shards`).
- One active relay: the process holding the ``relay`` lease (:class:`Lease`, row
  ``awooop_leaders.relay``) publishes; standbys try to acquire it every poll interval. One that
  dies or is frozen stops renewing, and a standby leads within ``AWOOOP_RELAY_LEADER_LEASE_S`` +
  ``AWOOOP_RELAY_POLL_INTERVAL_S`` (9 s by default); a session advisory lock could not do this.
- Fencing: the cursor save is a compare-and-set fenced by this relay's term
  (:mod:`awooop.streams.relay_cursor`). Before each publish to Redis the leader checks its local
  lease deadline (:meth:`Lease.check`). A process frozen between that check and its XADD sends that
  one batch after resuming: harmless, as its cursor started at or after the saved one the new
  leader started from and each relay publishes every stream's events in order, so every
  event's FIRST copy still arrives in stream order and nothing is skipped; the late batch only
  adds duplicates (at-least-once, R-31). The leader's connection has ``statement_timeout``,
  ``lock_timeout`` and ``idle_in_transaction_session_timeout`` at the lease.
- Wake-up: NOTIFY from the events' trigger, a linger, re-checks while rows are held back, a poll
  as the fallback (:mod:`awooop.streams.relay_wakeup`). Redis down: the publish raises, the attempt
  and failure are counted (metric, ``relay_failures`` on the cursor row), the loop backs off.

Trimming and the shards' safe replay points: :mod:`awooop.streams.relay_trim`. Losing Redis (R-33):
:mod:`awooop.streams.rebuild`. Trace context: the relay copies the producer's ``traceparent`` and
``tracestate`` from the event metadata into the envelope (:mod:`awooop.streams.tracing`).
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
)
from awooop.core.leadership import Lease, timeout_ms
from awooop.core.logs import get_logger
from awooop.core.loops import LoopContext
from awooop.core.pools import PLATFORM_ROLE, connect
from awooop.core.retries import CONNECTION_ERRORS
from awooop.eventlog import eventlog
from awooop.eventlog.eventlog import Cursor, RecordedEvent
from awooop.streams.backoff import RateLimiter
from awooop.streams.consumer import REDIS_ERRORS
from awooop.streams.keys import Keys
from awooop.streams.notices import deliver_notices
from awooop.streams.publish import by_shard
from awooop.streams.relay_ahead import READ_AHEAD_AFTER_S, ReadAhead
from awooop.streams.relay_cursor import LEADERSHIP, RelayCursor, count_failure
from awooop.streams.relay_shards import ShardPublisher
from awooop.streams.relay_trim import trim
from awooop.streams.relay_wakeup import NOTIFY_CHANNEL, Wakeup
from awooop.streams.tracing import publish_spans

log = get_logger(__name__)

BATCH_BUDGET_S = 0.5  # an iteration publishes at most this long, then yields to the loop

FaultHook = Callable[[str], Awaitable[None]]
PG_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    *CONNECTION_ERRORS,
    asyncpg.PostgresConnectionError,
)
CLOSE_ERRORS: tuple[type[BaseException], ...] = (*PG_CONNECTION_ERRORS, asyncpg.PostgresError)
# What ends an iteration's lead: the lease lost, or the database's statement failing.
LEAD_ERRORS: tuple[type[BaseException], ...] = (LeadershipLostError, *PG_CONNECTION_ERRORS)

# The leader's working connection: no statement, lock wait or open transaction outlives the
# lease; a cursor update lost in a Postgres crash only republishes (duplicates), so no need to
# wait for its WAL flush on every batch.
SESSION_SETTINGS = """
SELECT set_config('statement_timeout', $1, false), set_config('lock_timeout', $1, false),
       set_config('idle_in_transaction_session_timeout', $1, false),
       set_config('synchronous_commit', 'off', false)
"""


class Relay:
    """One relay process: leadership, and the loop that reads the log and publishes it.

    :meth:`step` is the body of the ``relay`` loop.
    """

    def __init__(
        self,
        *,
        settings: Settings,
        redis: Any,
        keys: Keys,
        relay_id: str | None = None,
        fault_hook: FaultHook | None = None,
        clock: Callable[[], float] = time.monotonic,  # when the cursor's save comes due
    ) -> None:
        self.settings = settings
        self.redis = redis
        self.keys = keys
        self.relay_id = relay_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.fault_hook = fault_hook
        self.is_leader = False
        self.caught_up = False  # the last read found nothing committed left to publish
        self.published = 0  # events published by this process
        self._cursor = RelayCursor(self.relay_id, clock)
        self._conn: Connection | None = None
        self._epochs_due = 0.0
        self._notices_due = 0.0
        self._trim_due = 0.0
        self._limiter = RateLimiter(30.0)
        self._ahead = ReadAhead()  # published ahead of the cursor (streams/relay_ahead.py)
        self._wakeup = Wakeup(
            linger_s=settings.relay_linger_s,
            poll_interval_s=settings.relay_poll_interval_s,
            on_notices=self._notices_now,
            dispatch_window_s=settings.relay_dispatch_window_s,
        )
        self.lease = Lease(
            database_url=settings.database_url,
            name=LEADERSHIP,
            holder=self.relay_id,
            lease_s=settings.relay_leader_lease_s,
            renew_s=settings.relay_leader_renew_s,
            # The renewal found the lease gone: wake the loop so that it steps down now.
            on_lost=self._wakeup.set,
            fault_hook=fault_hook,
            stall_s=settings.relay_stall_s,
        )
        self._shards = ShardPublisher(
            redis=redis,
            keys=keys,
            lease=self.lease,
            batch_size=settings.relay_batch_size,
            published_ahead=self._ahead.positions_after,
        )

    @property
    def cursor(self) -> Cursor:
        """Published up to here (saved at most CURSOR_SAVE_INTERVAL_S later)."""
        return self._cursor.position

    # --- the loop body ---------------------------------------------------------------------

    async def step(self, ctx: LoopContext) -> None:
        self._wakeup.event = ctx.wakeup
        try:
            if not await self._lead():
                return
            more = await self.run_once()
        except REDIS_ERRORS as exc:
            raise RedisUnavailableError(f"Redis refused the relay: {exc}") from exc
        except LEAD_ERRORS as exc:
            # A statement the server's bound cancelled after the lease ran out (the process stood
            # still: stopped, starved) is the leadership lost too, not the database.
            lost = exc.message if isinstance(exc, LeadershipLostError) else self.lease.lost()
            term = self.lease.term
            await self.close()
            if lost is None:
                raise DatabaseUnavailableError(f"relay lost its database: {exc}") from exc
            log.warning("relay_leadership_lost", relay_id=self.relay_id, term=term, reason=lost)
            return
        if more:
            ctx.wakeup.set()

    async def run_once(self) -> bool:
        """One leader iteration; True when more events are waiting right now."""
        now = time.monotonic()
        more = False
        failed: BaseException | None = None
        try:
            if now >= self._epochs_due:
                await self._shards.check_epochs(self.conn, self.cursor)
                self._epochs_due = now + self.settings.relay_poll_interval_s
            more = await self._drain_events(now + BATCH_BUDGET_S)
        except REDIS_ERRORS as exc:
            # One failed attempt to relay events, whichever Redis call refused.
            metrics.RELAY_ATTEMPTS.labels("events", "error").inc()
            await count_failure(self.conn, exc)
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
        self.lease.progressed()
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

    async def trim(self) -> None:
        """Trim the streams, store the shards' safe replay points (awooop.streams.relay_trim)."""
        await trim(self.conn, self._shards, self.cursor, self.settings.stream_maxlen)

    async def save_cursor(self) -> None:
        """Save the published position now (the end of a drain, a clean stop)."""
        await self._cursor.save(self.conn, self.lease.term)

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
        await self._cursor.load(self.conn)
        await self.conn.add_listener(NOTIFY_CHANNEL, self._wakeup.on_notify)
        self.is_leader = True
        self._shards.epochs.clear()
        self._ahead.reset()  # the term starts from the saved cursor: everything after it is sent
        self._epochs_due = self._notices_due = self._trim_due = 0.0
        log.info(
            "relay_leader",
            relay_id=self.relay_id,
            term=self.lease.term,
            tx_id=self.cursor.tx_id,
            position=self.cursor.position,
        )

    def _notices_now(self) -> None:
        self._notices_due = 0.0

    async def close(self) -> None:
        """Give up leadership and the connection (a standby takes over)."""
        self._wakeup.cancel()
        conn, self._conn = self._conn, None
        was_leader, self.is_leader = self.is_leader, False
        try:
            if conn is None or conn.is_closed():
                return
            try:
                if was_leader:
                    with contextlib.suppress(LeadershipLostError):
                        # fenced: refused when the lease is gone
                        await self._cursor.save(conn, self.lease.term)
                    await conn.remove_listener(NOTIFY_CHANNEL, self._wakeup.on_notify)
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
        self._wakeup.read_started()
        held: float | None
        batch, held = await eventlog.read_forward_and_held(self.conn, self.cursor, size)
        known = True  # whether ``held`` describes what follows the last batch read
        while batch:
            fresh = self._ahead.unpublished(batch)  # the rest was published ahead of the cursor
            spans = publish_spans(fresh, self.keys)
            grouped = by_shard(fresh, self.keys, contexts=spans.contexts)
            upcoming: list[RecordedEvent] = []
            try:
                if len(batch) < size:  # caught up: nothing to read meanwhile (no task to start)
                    left = await self._publish(fresh, grouped, False)
                else:  # a backlog: the plain read, probed once at its end
                    publishing = asyncio.create_task(self._publish(fresh, grouped, False))
                    try:
                        upcoming = await eventlog.read_forward(
                            self.conn, eventlog.advance(self.cursor, batch), size
                        )
                        known = False
                    finally:
                        left = await publishing
                if left:
                    await self._publish(fresh, left, True)
            except BaseException as exc:
                spans.end(exc)
                raise
            spans.end()
            if self.fault_hook is not None:
                await self.fault_hook("published")
            self._advance(batch, len(fresh))
            if time.monotonic() >= deadline and upcoming:
                self.caught_up = False
                metrics.OUTBOX_LAG.labels("events").set(
                    max(0.0, time.time() - upcoming[0].recorded_at.timestamp())
                )
                await self._cursor.save_if_due(self.conn, self.lease.term)
                return True
            batch = upcoming
        # Caught up with what the last read could see; ``held``: the age of a committed event
        # it could not take yet (an older transaction still runs), which no NOTIFY announces.
        if not known:
            held = await eventlog.held_back(self.conn, self.cursor)
        metrics.OUTBOX_LAG.labels("events").set(held or 0.0)
        self.caught_up = held is None
        if held is None:
            self._ahead.idle()
            self._wakeup.caught_up()
        else:
            if held >= READ_AHEAD_AFTER_S:  # not a commit in flight: see streams/relay_ahead.py
                ahead = self._ahead.publish(self.conn, self.cursor, self._shards, size)
                self.published += await ahead
            self._wakeup.held_back()
        await self._cursor.save_if_due(self.conn, self.lease.term)
        return False

    async def _publish(
        self,
        batch: Sequence[RecordedEvent],
        grouped: dict[int, list[tuple[str, bytes]]],
        may_rebuild: bool,
    ) -> dict[int, list[tuple[str, bytes]]]:
        # The cursor the batch starts at: a rebuild republishes the log up to there.
        return await self._shards.publish_batch(self.conn, self.cursor, batch, grouped, may_rebuild)

    def _advance(self, batch: Sequence[RecordedEvent], published: int) -> None:
        """The batch is in Redis (``published`` of its events: the rest had been published
        ahead): move the cursor (saved later, see the module docstring)."""
        self._cursor.advance(batch)
        self._ahead.passed(self.cursor)
        self.published += published
        metrics.RELAY_ATTEMPTS.labels("events", "ok").inc()
        metrics.RELAY_PUBLISHED.labels("events").inc(published)
