"""Single-leader loops: leadership held by a lease with a term, not by a session lock (R-19).

A loop that must run in one process at a time (the outbox relay) holds a row of
``awooop_leaders`` (migration 0080): ``holder``, ``term`` and ``lease_until``.

Why a lease and not a session advisory lock: a lock lives as long as its session, and a
session lives as long as its TCP connection. A process that is frozen (``kill -STOP``, a VM
paused, a GC or swap storm) keeps its connection and therefore its lock forever: no standby
ever takes over. A lease runs out on the database clock whether or not its holder is alive.

How it is kept:
- Acquire: a conditional UPDATE takes the row only when the lease has run out, was released,
  or is this holder's own; it sets ``term = term + 1`` and ``lease_until = now() + lease``.
  Every acquisition is a new term.
- Renew: every ``renew_s`` a background task (on its own connection, so a long publish or a
  shard rebuild never delays it) extends ``lease_until`` where holder AND term still match and
  the lease has not run out. Zero rows: leadership is lost for good (an expired term is never
  revived; re-acquiring gives a new term).
- Fencing: every write that moves shared state as leader (the relay's cursor save) checks
  holder, term and ``lease_until > now()`` in the SAME statement (the row locked
  ``FOR SHARE`` so that an acquisition waits for it), so a resumed ex-leader's write is refused
  by the database, whatever its own clock says.
- Local deadline: the holder also keeps a deadline on its own monotonic clock, the start of the
  last confirmed renewal plus the lease minus a margin (:func:`local_deadline`), and checks it
  (:meth:`Lease.check`) before each action it takes as leader (a publish to Redis). The start
  of the renewal is earlier than the database's ``now()`` in it, so the local deadline passes
  before the lease runs out in Postgres. ``CLOCK_MONOTONIC`` keeps running while a process is
  stopped: a process resumed from SIGSTOP finds its deadline passed at its first check and
  steps down before it publishes, without asking anyone.
- Stalls: a renewal proves the process is alive, not that its work moves. A holder stuck in a
  call that never returns (a socket that takes bytes and answers none, a lock, a bug) would
  renew forever and no standby would ever lead. So the holder reports each unit of work it
  finishes (:meth:`Lease.progressed`), and given ``stall_s`` the renewer gives the lease back
  (RELEASE, so a standby leads at its next try) once no work was reported for that long. When
  the stuck call returns, the holder's next :meth:`Lease.check` raises and it steps down; a
  call already on its way is the same one late call as a frozen process's (below).
- Timeouts: every statement of the lease has a timeout shorter than the renewal interval
  (client and server side); the leader's own working connection gets ``statement_timeout``,
  ``lock_timeout`` and ``idle_in_transaction_session_timeout`` at the lease (see
  ``Relay._lead``), so nothing a frozen leader left open in Postgres outlives its
  lease and blocks the next leader.

Bounds (defaults ``AWOOOP_RELAY_LEADER_LEASE_S`` = 8, ``AWOOOP_RELAY_LEADER_RENEW_S`` = 2): a
frozen leader's lease runs out at most ``lease_s`` after it froze; a standby tries every poll
interval of its loop, so it leads at most ``lease_s + poll interval`` after the freeze. A
stuck leader gives the lease back at most ``stall_s + renew_s`` after its last finished work
(``AWOOOP_RELAY_STALL_S`` = 30), and a standby leads one poll interval later.

What the fence cannot cover: a write to ANOTHER system (an XADD to Redis) made in the instant
between the holder's last deadline check and the call itself, if the process is frozen right
there. After resuming it sends that one call late. The relay's argument why that is harmless
(a duplicate, never a gap and never out of order) is in :mod:`awooop.streams.relay`.

The pure decisions (:func:`local_deadline`, :func:`check_timings`) have unit tests; the lease
itself is tested against Postgres (tests/integration/test_relay_leadership.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from awooop.core.db import Connection
from awooop.core.errors import DatabaseUnavailableError, LeadershipLostError
from awooop.core.logs import get_logger
from awooop.core.pools import PLATFORM_ROLE, connect
from awooop.core.retries import CONNECTION_ERRORS

log = get_logger(__name__)

# The local deadline stops this much of the lease short of the database's expiry: room for
# a clock that runs a little slow and for a call already on its way to Redis.
MARGIN_FRACTION = 0.2

FaultHook = Callable[[str], Awaitable[None]]
# What a lease statement may raise when Postgres is slow or away (a timeout is one of them).
LEASE_ERRORS: tuple[type[BaseException], ...] = (
    TimeoutError,
    DatabaseUnavailableError,
    *CONNECTION_ERRORS,
    asyncpg.PostgresError,
)

# --- SQL -----------------------------------------------------------------------------------

ACQUIRE = """
UPDATE awooop_leaders
SET holder = $2, term = term + 1, lease_until = now() + make_interval(secs => $3),
    acquired_at = now(), renewed_at = now()
WHERE name = $1 AND (holder IS NULL OR holder = $2 OR lease_until <= now())
RETURNING term
"""
RENEW = """
UPDATE awooop_leaders
SET lease_until = now() + make_interval(secs => $4), renewed_at = now()
WHERE name = $1 AND holder = $2 AND term = $3 AND lease_until > now()
RETURNING term
"""
RELEASE = """
UPDATE awooop_leaders SET holder = NULL, lease_until = now()
WHERE name = $1 AND holder = $2 AND term = $3
"""
# A leader's fenced write joins this condition in the same statement (see ADVANCE_CURSOR in
# streams/relay_cursor.py): ``EXISTS (SELECT 1 FROM awooop_leaders WHERE name = .. AND holder = ..
# AND term = .. AND lease_until > now() FOR SHARE)``. FOR SHARE: an acquisition (an UPDATE of
# that row) waits until the write's transaction ends, then sees the lease it wrote under.

# --- pure decisions ------------------------------------------------------------------------


def local_deadline(renewal_started: float, lease_s: float) -> float:
    """Until when (monotonic) this holder may act: the lease counted from BEFORE the statement
    that set it, less the margin."""
    return renewal_started + lease_s * (1.0 - MARGIN_FRACTION)


def check_timings(lease_s: float, renew_s: float) -> str | None:
    """Why these timings cannot hold a lease (None: they can). A renewal must be able to fail
    once (a slow or lost statement) and the next one still land before the local deadline."""
    if lease_s <= 0 or renew_s <= 0:
        return "must be positive numbers of seconds"
    if 2 * renew_s > lease_s * (1.0 - MARGIN_FRACTION):
        return (
            f"the renewal interval must be at most {(1.0 - MARGIN_FRACTION) / 2:.2f} of the "
            "lease (two renewals fit before the holder's local deadline)"
        )
    return None


def stalled(now: float, progressed_at: float, stall_s: float | None) -> bool:
    """Whether a holder whose last finished work was at ``progressed_at`` must give its lease
    back at ``now`` (``stall_s`` None: never)."""
    return stall_s is not None and now - progressed_at >= stall_s


def timeout_ms(seconds: float) -> str:
    """A Postgres timeout setting (milliseconds, at least 1) for ``seconds``."""
    return str(max(1, int(seconds * 1000)))


# --- the lease -----------------------------------------------------------------------------


class Lease:
    """One process's claim on one leadership name (see the module docstring).

    ``acquire()`` is tried by a standby every iteration; once it returns True a task renews
    the lease every ``renew_s`` until :meth:`release`, :meth:`close`, or loss (then
    ``on_lost`` is called, so the loop can step down at once). ``check()`` raises
    :class:`LeadershipLostError` when this holder must not act as leader any more.
    """

    def __init__(
        self,
        *,
        database_url: str,
        name: str,
        holder: str,
        lease_s: float,
        renew_s: float,
        on_lost: Callable[[], None] | None = None,
        fault_hook: FaultHook | None = None,
        stall_s: float | None = None,
    ) -> None:
        problem = check_timings(lease_s, renew_s)
        if problem is not None:
            raise ValueError(f"lease {lease_s} s, renewal every {renew_s} s: {problem}")
        self.database_url = database_url
        self.name = name
        self.holder = holder
        self.lease_s = lease_s
        self.renew_s = renew_s
        self.on_lost = on_lost
        self.fault_hook = fault_hook  # tests: called before each renewal ("renew")
        self.stall_s = stall_s  # None: renew while the process lives, whatever its work does
        self.progressed_at = 0.0  # monotonic: the holder's last finished unit of work
        self.term: int | None = None  # the term held (None: not the leader)
        self.deadline = 0.0  # monotonic: act as leader only before this
        self.lost_reason: str | None = None
        self._conn: Connection | None = None
        self._renewer: asyncio.Task[None] | None = None

    @property
    def held(self) -> bool:
        return self.term is not None and self.lost_reason is None

    def progressed(self) -> None:
        """The holder finished a unit of its work just now (see "Stalls" above)."""
        self.progressed_at = time.monotonic()

    def check(self) -> None:
        """Raise unless this holder may still act as leader (held, local deadline ahead)."""
        if self.term is None:
            raise LeadershipLostError("not the leader", name=self.name)
        reason = self.lost()
        if reason is not None:
            raise LeadershipLostError(
                f"{self.name} leadership lost: {reason}", name=self.name, term=self.term
            )

    def lost(self) -> str | None:
        """Why the term held may no longer be acted on, by the renewer's word or by this
        process's own clock (None: it still may, or no term is held). The clock counts too: a
        process that stood still (stopped, starved) past its deadline wakes before its renewer
        has had a turn to say so."""
        if self.term is not None and self.lost_reason is None and time.monotonic() >= self.deadline:
            self._lose("the lease ran out on this process's clock before a renewal confirmed it")
        return self.lost_reason

    async def acquire(self) -> bool:
        """Take the lease if it is free or ran out; True: this holder leads with a new term."""
        if self.held:
            return True
        await self._stop_renewer()
        conn = await self._connection()
        started = time.monotonic()
        try:
            term = await self._fetch(conn, ACQUIRE, self.name, self.holder, self.lease_s)
        except LEASE_ERRORS as exc:
            self._drop_connection()
            raise DatabaseUnavailableError(f"cannot acquire the {self.name} lease: {exc}") from exc
        if term is None:
            self.term = None
            return False
        self.term = int(term)
        self.lost_reason = None
        self.deadline = local_deadline(started, self.lease_s)
        self.progressed_at = started
        self._renewer = asyncio.create_task(self._renew_loop(), name=f"lease-{self.name}")
        log.info("leader_acquired", leadership=self.name, holder=self.holder, term=self.term)
        return True

    async def release(self) -> None:
        """Stop renewing and give the lease back (a standby takes it at its next try)."""
        await self._stop_renewer()
        term, self.term = self.term, None
        self.lost_reason = None
        if term is not None and self._conn is not None and not self._conn.is_closed():
            await self._give_back(term)

    async def close(self) -> None:
        await self.release()
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            try:
                await conn.close(timeout=5)
            except LEASE_ERRORS:
                conn.terminate()

    # --- internals ---------------------------------------------------------------------------

    def _lose(self, reason: str) -> None:
        if self.lost_reason is not None:
            return
        self.lost_reason = reason
        log.warning(
            "leader_lost", leadership=self.name, holder=self.holder, term=self.term, reason=reason
        )
        if self.on_lost is not None:
            self.on_lost()

    async def _renew_loop(self) -> None:
        term = self.term
        assert term is not None  # started by acquire() after it set the term
        next_at = time.monotonic() + self.renew_s
        while self.lost_reason is None:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            if self.fault_hook is not None:
                await self.fault_hook("renew")
            started = time.monotonic()
            next_at = started + self.renew_s
            if started >= self.deadline:
                self._lose("the lease ran out before it could be renewed")
                return
            if stalled(started, self.progressed_at, self.stall_s):
                self._lose(
                    f"no work finished for {started - self.progressed_at:.1f} s (a call that"
                    " does not return, or every attempt failing): the lease is given back"
                )
                await self._give_back(term)
                return
            try:
                conn = await self._connection()
                renewed = await self._fetch(conn, RENEW, self.name, self.holder, term, self.lease_s)
            except LEASE_ERRORS as exc:
                # Retried at the next interval while the local deadline allows.
                log.warning("leader_renew_failed", leadership=self.name, error=str(exc))
                self._drop_connection()
                continue
            if renewed is None:
                self._lose("another holder took the lease (or it ran out) before the renewal")
                return
            self.deadline = local_deadline(started, self.lease_s)

    async def _give_back(self, term: int) -> None:
        try:
            conn = await self._connection()
            await conn.execute(RELEASE, self.name, self.holder, term, timeout=self.renew_s)
        except LEASE_ERRORS as exc:
            # The lease runs out by itself (no more renewals); only the standby's wait is longer.
            log.warning("leader_release_failed", leadership=self.name, error=str(exc))
            self._drop_connection()

    async def _fetch(self, conn: Connection, query: str, *args: object) -> Any:
        return await conn.fetchval(query, *args, timeout=self.renew_s)

    async def _connection(self) -> Connection:
        if self._conn is None or self._conn.is_closed():
            self._conn = await connect(
                self.database_url, PLATFORM_ROLE, connect_timeout=self.renew_s
            )
            ms = timeout_ms(self.renew_s)
            await self._conn.execute(
                "SELECT set_config('statement_timeout', $1, false),"
                " set_config('lock_timeout', $1, false)",
                ms,
            )
        return self._conn

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.terminate()

    async def _stop_renewer(self) -> None:
        task, self._renewer = self._renewer, None
        if task is None or task is asyncio.current_task():
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
