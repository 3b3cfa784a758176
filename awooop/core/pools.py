"""Connections and pools: the roles, the JSON codecs, and how statements are planned.

Two roles (R-43): ``awooop_app`` (row-level security: a transaction sees the project set in
``awooop.project_id`` only, and no tenant rows without it) and ``awooop_platform`` (BYPASSRLS,
for the platform loops that work across projects). JSON and JSONB columns are encoded and
decoded with msgspec on every connection.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeAlias

import asyncpg
import msgspec

from awooop.core.errors import DatabaseUnavailableError
from awooop.core.retries import CONNECTION_ERRORS, POISONING_ERRORS

if TYPE_CHECKING:
    from asyncpg.pool import PoolConnectionProxy

    Connection: TypeAlias = asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]
    Pool: TypeAlias = asyncpg.Pool[asyncpg.Record]
else:
    Connection = asyncpg.Connection
    Pool = asyncpg.Pool

APP_ROLE = "awooop_app"
PLATFORM_ROLE = "awooop_platform"

SET_TENANT = "SELECT set_config('awooop.project_id', $1, true)"
# For connections dedicated to one tenant path (ingest sessions, the pointer check) that keep
# the project at session level and only change it when the next use is for another project.
SET_SESSION_TENANT = "SELECT set_config('awooop.project_id', $1, false)"

_json_encode = msgspec.json.Encoder().encode
_json_decode = msgspec.json.Decoder().decode


# Every new connection first commits one write of its own (a transactional WAL message, no
# table) and so waits, like every commit, for the synchronous standby: it serves nothing before
# the server's WAL up to now is on the standby. Why: a primary killed with commits in flight
# (flushed locally, not yet sent) is restarted by its keeper and serves again for a second or
# more before pg_auto_failover demotes it; those commits are visible there and are not on the
# standby that is being promoted. Measured with 20 writers and a reader on the multi-host URL:
# in 2 of 3 kills the reader saw 18-19 rows that did not exist after the failover. Read by the
# relay they would be published to Redis (events that are not in the log), read by ingest a
# retry would be answered 200 with a run that is then gone. With this barrier a connection to
# that server waits until the demotion closes it (0 such rows in 4 kills), and the caller's
# retry reaches the new primary (tests/acceptance/test_failover.py,
# test_no_connection_reads_a_commit_the_failover_loses: with this statement made a no-op it
# failed in 2 of 3 runs). Costs one commit per connection; pools keep theirs open.
DURABLE = "SELECT pg_logical_emit_message(true, 'awooop', 'connected')"
DURABLE_TIMEOUT_S = 10.0


# A peer that goes silent (its host died, a failover moved the address, a firewall or NAT
# dropped the flow) sends no reset: without these, a statement on that connection waits for the
# kernel's retransmissions to give up (tcp_retries2: about 15 minutes) and an idle connection
# (a LISTEN, a pooled one) is never found dead. A loop or a listener is then stuck that long.
# With them, data left unacknowledged for TCP_USER_TIMEOUT_S fails the connection, and an idle
# one is probed after KEEPALIVE_IDLE_S (then every KEEPALIVE_INTERVAL_S; the user timeout also
# bounds the probes). Only a dead path trips them: a slow statement has nothing unacknowledged
# on the wire. The worker's lease paths have their own, shorter bounds (awooop.core.db.bounded).
KEEPALIVE_IDLE_S = 10
KEEPALIVE_INTERVAL_S = 5
KEEPALIVE_COUNT = 3
TCP_USER_TIMEOUT_S = 30


def detect_dead_peer(conn: Connection) -> None:
    """Keepalive probes and a user timeout on ``conn``'s TCP socket (a Unix socket has none).
    asyncpg has no option for these (MagicStack/asyncpg#606): they are set on its transport's
    socket, and tests/integration/test_dead_peer.py fails if that stops working."""
    transport = getattr(conn, "_transport", None)
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, KEEPALIVE_IDLE_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, KEEPALIVE_INTERVAL_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, KEEPALIVE_COUNT)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, TCP_USER_TIMEOUT_S * 1000)


async def init_connection(conn: Connection) -> None:
    """Dead-peer detection (:func:`detect_dead_peer`), the JSON codecs, then the durability
    barrier (:data:`DURABLE`)."""
    detect_dead_peer(conn)
    for name in ("json", "jsonb"):
        await conn.set_type_codec(
            name,
            schema="pg_catalog",
            encoder=lambda value: _json_encode(value).decode(),
            decoder=_json_decode,
            format="text",
        )
    await conn.execute(DURABLE, timeout=DURABLE_TIMEOUT_S)


async def init_service_connection(conn: Connection) -> None:
    """A producer service's own connection (``awooop.producer.init_connection``): dead-peer
    detection and the durability barrier, as on the runtime's connections. Its type codecs
    are left as asyncpg's, or the service's own: the producer's statements pass their JSON as
    text and read none, so they need no codec, and the service's JSON keeps its meaning (the
    runtime's codecs encode a ``str`` as a JSON string, where asyncpg's take it as JSON text)."""
    detect_dead_peer(conn)
    await conn.execute(DURABLE, timeout=DURABLE_TIMEOUT_S)


async def connect(
    url: str, role: str | None = None, connect_timeout: float = 10.0, *, cached_plans: bool = False
) -> Connection:
    """One connection (for LISTEN, migrations, advisory-lock owners); ``cached_plans``: see
    :data:`CACHED_PLAN_SETTINGS`."""
    settings = {"role": role, **SERVER_CHECKS} if role else dict(SERVER_CHECKS)
    if cached_plans:
        settings.update(CACHED_PLAN_SETTINGS)
    try:
        conn = await asyncpg.connect(url, server_settings=settings, timeout=connect_timeout)
    except CONNECTION_ERRORS as exc:
        raise DatabaseUnavailableError(f"cannot connect to the database: {exc}") from exc
    try:
        await init_connection(conn)
    except BaseException as exc:
        conn.terminate()
        if isinstance(exc, CONNECTION_ERRORS):
            raise DatabaseUnavailableError(f"cannot connect to the database: {exc!r}") from exc
        raise
    return conn


@contextlib.contextmanager
def drop_if_poisoned(conn: Connection) -> Iterator[None]:
    """Close ``conn`` (its pool opens a fresh one) when an error says it can no longer serve
    (:data:`awooop.core.retries.POISONING_ERRORS`): a session opened during a read-only window
    stays read-only after it, and nothing else would ever replace it."""
    try:
        yield
    except POISONING_ERRORS:
        conn.terminate()
        raise


async def _transaction_scoped_reset(_conn: Any) -> None:
    """Release without asyncpg's reset query (RESET ALL, UNLISTEN *, CLOSE ALL, advisory
    unlock): one round trip on every transaction's path, for session state these pools never
    hold. Their connections are used only through ``Database.tenant`` and
    ``Database.platform`` (:mod:`awooop.core.db`), inside one transaction each: the tenant is
    set with ``set_config(..., true)`` (transaction-local), LISTEN and session advisory locks
    live on dedicated connections (:func:`connect`). asyncpg still rolls back an open
    transaction and drops client-side listeners before this runs."""


# Custom plans for every statement of the role pools. asyncpg prepares each statement once per
# connection, and Postgres switches a prepared statement to a cached generic plan after five
# runs; a generic plan made while a table was small (a fresh deployment, a table that grew
# since its last ANALYZE) keeps a sequential scan where the table is now large. Seen in the
# worker: each 1-row UPDATE of awooop_run_state by primary key took up to 10 ms over 5,000
# rows, a claim of 63 runs 72 ms instead of 15-20, until autovacuum's ANALYZE replaced the
# plan (one worker: 330-1,300 no-op runs/s depending on when that happened; 920-1,000 with
# custom plans). Planning each execution costs about 0.1 ms per statement.
PLAN_CACHE_MODE = "force_custom_plan"

# Connections that run a FIXED set of statements on every run's path (the relay's connection,
# the worker's run pool, the HTTP ingest sessions) plan each statement once and keep that
# generic plan. These are CTE statements over several tables: planning one took 0.3-0.6 ms of
# Postgres CPU, executing it 0.02-0.5 ms (pg_stat_statements with track_planning, 100 runs/s):
# planning was over half of Postgres's work per run. A generic plan made while a table was
# small could keep a sequential scan as the table grows (the role pools' reason to plan every
# execution, above); with sequential scans disabled the planner takes an index path wherever
# one exists, and tests/integration/test_cached_plans.py checks that the generic plan of every
# statement these connections prepare, made on an empty database, scans no table sequentially.
# JIT off: these are short statements, and a generic plan's row estimates grow with the tables
# until its cost passes jit_above_cost; from then on every execution compiled the plan first
# (the relay's read at 10M events: tens of ms each, for a read that takes well under one).
# What a client abandons, the server abandons too: every connection asks its backend to check
# every second, while a statement runs, whether the client is still there, and to end the
# statement (and the session) when the socket is closed. Without it a statement the client gave
# up on (a bounded wait that terminated its connection, a request whose client left, a killed
# process) went on waiting on the server: seen 44-54 s later behind a table lock, then running
# with its old start time as now(). PostgreSQL 14 or later.
SERVER_CHECKS = {"client_connection_check_interval": "1000"}

CACHED_PLAN_SETTINGS = {
    "plan_cache_mode": "force_generic_plan",
    "enable_seqscan": "off",
    "jit": "off",
}


def milliseconds(seconds: float) -> str:
    """A duration setting's value (statement_timeout and the like): whole milliseconds, at
    least 1 (0 would mean no bound at all)."""
    return str(max(1, round(seconds * 1000)))


def server_bound(timeout_s: float) -> dict[str, str]:
    """Session settings that end, on the server, any statement, lock wait or open transaction
    of the connection that lasts longer than ``timeout_s``: nothing a client gave up on can
    run later, whatever the network did to the client's own bound."""
    ms = milliseconds(timeout_s)
    return {
        "statement_timeout": ms,
        "lock_timeout": ms,
        "idle_in_transaction_session_timeout": ms,
    }


async def create_pool(
    url: str,
    role: str,
    min_size: int = 1,
    max_size: int = 10,
    *,
    cached_plans: bool = False,
    bound_s: float | None = None,
) -> Pool:
    """A role pool; ``bound_s``: the server-side bound of every statement (:func:`server_bound`)."""
    # The role pools run the runtime's short statements too: never worth compiling.
    settings = {"role": role, "plan_cache_mode": PLAN_CACHE_MODE, "jit": "off", **SERVER_CHECKS}
    if cached_plans:
        settings.update(CACHED_PLAN_SETTINGS)
    if bound_s is not None:
        settings.update(server_bound(bound_s))
    try:
        pool = await asyncpg.create_pool(
            url,
            min_size=min_size,
            max_size=max_size,
            init=init_connection,
            reset=_transaction_scoped_reset,
            server_settings=settings,
            timeout=10.0,
        )
    except CONNECTION_ERRORS as exc:
        raise DatabaseUnavailableError(f"cannot connect to the database: {exc}") from exc
    return pool


# A producer service's pool (awooop.producer.create_pool): its connections keep one generic
# plan per prepared statement, and JIT off, as the runtime's ingest sessions do. Why: on a
# database with statistics (any that has been analyzed with rows in it), Postgres's default
# plan choice made a custom plan of the ingest statement at every execution, and planning that
# statement is most of its cost: 2.3 ms of Postgres CPU per submit instead of 1.1 (measured by
# ops/bench/producer_pool.py, 5,000 runs in the tables; on empty tables it keeps the generic
# plan, which is why a fresh database hides it). JIT off: a generic plan's estimates grow with
# the tables, and past jit_above_cost every execution would compile it first.
SERVICE_PLAN_SETTINGS = {"plan_cache_mode": "force_generic_plan", "jit": "off"}


async def _release_as_is(_conn: Any) -> None:
    """Release without asyncpg's reset query (see :func:`create_service_pool`)."""


async def create_service_pool(
    dsn: str | None = None,
    *,
    init: Callable[[Connection], Awaitable[None]] | None = None,
    session_reset: bool = False,
    server_settings: dict[str, str] | None = None,
    **kwargs: Any,
) -> Pool:
    """A producer service's pool (``awooop.producer.create_pool``): ``asyncpg.create_pool``
    with each new connection set up by :func:`init_service_connection` (then ``init``), the
    server's check for a client gone (:data:`SERVER_CHECKS`) and
    :data:`SERVICE_PLAN_SETTINGS` (``server_settings`` win over both), and releases without
    asyncpg's reset query (``SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET
    ALL``): one round trip per transaction for session state a producing transaction does not
    leave (the tenant is transaction-local; asyncpg still rolls back an open transaction and
    drops listeners). ``session_reset=True`` keeps that query, for code that leaves session
    state on these connections (a SET without LOCAL, LISTEN, a session advisory lock).
    Other keyword arguments go to ``asyncpg.create_pool``."""

    async def set_up(conn: Connection) -> None:
        await init_service_connection(conn)
        if init is not None:
            await init(conn)

    settings = {**SERVER_CHECKS, **SERVICE_PLAN_SETTINGS, **(server_settings or {})}
    pool: Pool = await asyncpg.create_pool(
        dsn,
        init=set_up,
        reset=None if session_reset else _release_as_is,
        server_settings=settings,
        **kwargs,
    )
    return pool
