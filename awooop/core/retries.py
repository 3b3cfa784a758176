"""Which Postgres failures are transient, and retrying a whole transaction on them.

Two families: the database being away (:data:`CONNECTION_ERRORS`, turned into E-DB-001 where
a process must tell it from a handler's own failure) and two transactions getting in each
other's way (:data:`RETRYABLE_PG_ERRORS`, retried whole by :func:`retry_transaction`).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import asyncpg

from awooop.core.errors import (
    DatabaseBusyError,
    DatabaseRefusedError,
    DatabaseUnavailableError,
    StreamOrderConflictError,
)

T = TypeVar("T")

# Postgres ending a transaction that met another: a serialisation failure or a lock cycle.
CONFLICT_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.SerializationError,
    asyncpg.DeadlockDetectedError,
)
RETRYABLE_PG_ERRORS: tuple[type[BaseException], ...] = (
    *CONFLICT_ERRORS,
    StreamOrderConflictError,
)
# Postgres being away or full, in every form it takes: refused or reset (OSError), no answer
# in time (TimeoutError, a cancelled statement), a lost or rejected connection (class 08), no
# free connection slot (53300), the server starting up or shutting down (57P01-57P03), and
# asyncpg's own "connection is closed". One family: every process waits these out with
# backoff (awooop.core.loops, the worker's start) and none of them is a run's failure.
# Across a primary failover two more show (tests/acceptance/test_failover.py): no host of a
# multi-host URL is read-write yet (TargetServerAttributeNotMatched), and a pooled connection
# whose server died while it was idle fails its next statement with "cannot switch to state
# N; another operation (2) is in progress" (the protocol still consuming the server's FATAL
# message). Both are asyncpg's InternalClientError: taken for a handler's own failure, the
# second failed a run (E-HANDLER-001) and answered an ingest request with 500. And a server
# that stops taking writes under its open connections: pg_auto_failover sets
# default_transaction_read_only on the primary it demotes (the keeper restarted it after the
# kill and it serves until it is stopped), so a write there fails with 25006
# (ReadOnlySQLTransactionError) for a second or two: ingest answered 500 throughout (seen with
# a CPU burner on a core). No code here writes in a READ ONLY transaction on purpose; the one
# guard that relies on the error (Database.platform(), a write by mistake) still raises it.
# A database that is there but refuses the work for a while is the same family: a window of
# default_transaction_read_only, a privilege revoked from a runtime role, a full disk or no
# memory (class 53), a lock held longer than lock_timeout (55P03). Each is waited out and none
# is a run's failure. Row-level security refusals are 42501 too: the runtime's own roles meet
# them only through a bug (a write for the wrong project), which is then retried and logged
# rather than failing a run; producer logins get the ingest guard's coded refusals first.
REFUSAL_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.ReadOnlySQLTransactionError,
    asyncpg.InsufficientPrivilegeError,
    asyncpg.InsufficientResourcesError,
)
# No answer in time: a server-side statement or lock bound fired.
SLOW_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.QueryCanceledError,
    asyncpg.LockNotAvailableError,
)
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.TooManyConnectionsError,
    asyncpg.CannotConnectNowError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    *SLOW_ERRORS,
    *REFUSAL_ERRORS,
)
# What leaves a connection unable to serve for the rest of its life: a session opened while
# the database was read-only keeps default_transaction_read_only after the window closes, and a
# connection to a server that was demoted to a standby stays there. The pools drop such a
# connection (awooop.core.pools.drop_if_poisoned) so that the next one is opened afresh.
POISONING_ERRORS: tuple[type[BaseException], ...] = (asyncpg.ReadOnlySQLTransactionError,)


def refused_by_policy(exc: BaseException) -> bool:
    """Pure: a row-level security refusal (42501 like a revoked privilege, told apart by its
    message): a write for a project the session may not touch, never transient, so never
    "retry later". Postgres words it so in every locale the runtime's logins can get (the
    server's lc_messages; only a superuser may change it per session)."""
    return isinstance(exc, asyncpg.InsufficientPrivilegeError) and "row-level security" in str(exc)


def unavailable(exc: BaseException, what: str) -> DatabaseUnavailableError:
    """The catalog error for ``exc`` of :data:`CONNECTION_ERRORS` or :data:`CONFLICT_ERRORS`:
    refused (E-DB-002), no answer in time or in another transaction's way past every retry
    (E-DB-003), or away (E-DB-001)."""
    if isinstance(exc, REFUSAL_ERRORS) and not isinstance(exc, asyncpg.TooManyConnectionsError):
        return DatabaseRefusedError(f"{what}: {exc!r}")
    if isinstance(exc, SLOW_ERRORS + CONFLICT_ERRORS):
        return DatabaseBusyError(f"{what}: {exc!r}")
    return DatabaseUnavailableError(f"{what}: {exc!r}")


@contextlib.contextmanager
def unavailable_on_connection_errors(what: str) -> Iterator[None]:
    """Turn a lost or refused connection into DatabaseUnavailableError (E-DB-001, retryable):
    how the worker tells Postgres being away from a handler's own failure."""
    try:
        yield
    except CONNECTION_ERRORS as exc:
        if refused_by_policy(exc):
            raise
        raise unavailable(exc, what) from exc


@contextlib.contextmanager
def unavailable_on_store_errors(what: str) -> Iterator[None]:
    """:func:`unavailable_on_connection_errors`, and a conflict that outlasted its retries
    (:data:`CONFLICT_ERRORS`) as DatabaseBusyError (E-DB-003): for the runtime's own calls a
    handler makes (a journal write, a model-call record, a wait), whose transaction can meet
    a migrator's or a reaper's in a lock cycle. That is the store being busy, not the run
    failing: the worker gives the attempt back (awooop.worker.outcomes). A producer's caller,
    who owns the transaction, gets Postgres' own error instead (documented there)."""
    try:
        with unavailable_on_connection_errors(what):
            yield
    except CONFLICT_ERRORS as exc:
        raise unavailable(exc, what) from exc


async def retry_transaction(
    once: Callable[[], Awaitable[T]],
    attempts: int = 5,
    *,
    retry_on: tuple[type[BaseException], ...] = RETRYABLE_PG_ERRORS,
) -> T:
    """Retry a whole transaction on serialisation, deadlock and stream-order conflicts (and on
    a caller's own races, ``retry_on``), with a short random pause growing per attempt."""
    for attempt in range(1, attempts + 1):
        try:
            return await once()
        except retry_on:
            if attempt == attempts:
                raise
            await asyncio.sleep(random.uniform(0, 0.005 * attempt))
    raise AssertionError("unreachable")
