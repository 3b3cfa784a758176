"""The database being away, refusing or too slow, told by SQLSTATE whatever the driver.

asyncpg's exceptions are sorted by :mod:`awooop.core.retries`; psycopg's (raised by psycopg
itself, or by Django's cursor with psycopg's error as the cause) by their SQLSTATE here, into
the same catalog errors: E-DB-001 (away), E-DB-002 (refusing), E-DB-003 (no answer in time).
Every other error (a serialisation failure, a deadlock) is raised as the driver raised it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from awooop.core.errors import (
    DatabaseBusyError,
    DatabaseRefusedError,
    DatabaseUnavailableError,
)

# as REFUSAL_ERRORS / SLOW_ERRORS / CONNECTION_ERRORS in awooop.core.retries
REFUSING = ("25006", "42501", "53")  # read-only, a privilege, resources (class 53)
SLOW = ("57014", "55P03")  # statement cancelled (a timeout), lock not available
AWAY = ("08", "53300", "57P01", "57P02", "57P03")  # connection lost, no slot, shutting down


def sqlstate_of(exc: BaseException) -> tuple[str | None, bool]:
    """The SQLSTATE of ``exc`` or of its cause, and whether it is a psycopg error at all."""
    for error in (exc, exc.__cause__):
        if error is not None and type(error).__module__.startswith("psycopg"):
            return getattr(error, "sqlstate", None), True
    return None, False


def translated(exc: BaseException, what: str) -> BaseException | None:
    """Pure: the catalog error for a driver's ``exc``, or None: raise it as it is."""
    sqlstate, psycopg_error = sqlstate_of(exc)
    if not psycopg_error:
        return None
    if sqlstate is None:  # psycopg's own: the connection is closed or was lost
        name = type(exc.__cause__ or exc).__name__
        if name in ("OperationalError", "InterfaceError"):
            return DatabaseUnavailableError(f"{what}: {exc!r}")
        return None
    if sqlstate.startswith(AWAY):
        return DatabaseUnavailableError(f"{what}: {exc!r}")
    if sqlstate == "42501" and "row-level security" in str(exc):
        return None  # a write for a project the session may not touch: never transient
    if sqlstate.startswith(REFUSING):
        return DatabaseRefusedError(f"{what}: {exc!r}")
    if sqlstate in SLOW:
        return DatabaseBusyError(f"{what}: {exc!r}")
    return None


@contextlib.contextmanager
def unavailable_on_driver_errors(what: str) -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        error = translated(exc, what)
        if error is None:
            raise
        raise error from exc
