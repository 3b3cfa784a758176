"""A pool connection whose every statement must answer in time, whatever the network does."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg

from awooop.core.errors import DatabaseUnavailableError
from awooop.core.pools import Connection, Pool, drop_if_poisoned
from awooop.core.retries import CONNECTION_ERRORS


@asynccontextmanager
async def bounded(
    pool: Pool, timeout_s: float, *, transaction: bool, readonly: bool = False
) -> AsyncIterator[Connection]:
    """A pool connection (in a transaction if asked) on which every statement must answer
    within ``timeout_s`` (and the connection itself be had within it), whatever the network
    does.

    Why not ``asyncio.timeout`` alone: a cancelled asyncpg statement sends a cancel request on
    a new connection and, inside a transaction, a ROLLBACK; on a black-holed network both wait
    forever too, and so would the pool's release. Instead a timer on the event loop
    *terminates* the connection when no statement has answered for ``timeout_s`` (its socket
    is closed, nothing more is sent): every await on it fails at once with a connection error,
    raised here as DatabaseUnavailableError (E-DB-001). The pool replaces the connection.
    The bound is per statement, not per transaction: a transaction of several statements on a
    slow but working link goes on as long as each one answers in time."""
    loop = asyncio.get_running_loop()
    try:
        conn = await pool.acquire(timeout=timeout_s)
    except CONNECTION_ERRORS as exc:
        raise DatabaseUnavailableError(
            f"no database connection within {timeout_s:g} s: {exc!r}"
        ) from exc
    expired = False
    released = False  # query-logger callbacks run after the query, possibly after release

    def expire() -> None:
        nonlocal expired
        if not released:
            expired = True
            conn.terminate()

    timer = loop.call_later(timeout_s, expire)

    def answered(_query: object) -> None:
        nonlocal timer
        if not (expired or released):
            timer.cancel()
            timer = loop.call_later(timeout_s, expire)

    conn.add_query_logger(answered)
    try:
        with drop_if_poisoned(conn):
            if transaction:
                async with conn.transaction(readonly=readonly):
                    yield conn
            else:
                yield conn
    except Exception as exc:
        if expired:
            raise DatabaseUnavailableError(
                f"a database statement did not answer within {timeout_s:g} s"
            ) from exc
        raise
    finally:
        released = True
        timer.cancel()
        if not expired:
            # A connection the server closed (a failover, a restart) was already handed back
            # by asyncpg and its proxy detached: the error to raise is the one above, not
            # "connection has been released back to the pool". Releasing it again is a no-op.
            with contextlib.suppress(asyncpg.InterfaceError):
                conn.remove_query_logger(answered)
            await pool.release(conn)
