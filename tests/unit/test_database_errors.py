"""The family of "the database cannot serve us now" errors and the catalog error each becomes."""

from __future__ import annotations

import asyncpg
import pytest

from awooop.core.errors import DatabaseBusyError, DatabaseRefusedError, DatabaseUnavailableError
from awooop.core.retries import (
    CONNECTION_ERRORS,
    refused_by_policy,
    unavailable,
    unavailable_on_connection_errors,
    unavailable_on_store_errors,
)
from awooop.worker.outcomes import infrastructure_failure

RLS = 'new row violates row-level security policy for table "awooop_events"'


@pytest.mark.parametrize(
    ("error", "expected", "code"),
    [
        (ConnectionResetError(), DatabaseUnavailableError, "E-DB-001"),
        (asyncpg.TooManyConnectionsError("too many"), DatabaseUnavailableError, "E-DB-001"),
        (asyncpg.ReadOnlySQLTransactionError("read-only"), DatabaseRefusedError, "E-DB-002"),
        (asyncpg.InsufficientPrivilegeError("permission denied"), DatabaseRefusedError, "E-DB-002"),
        (asyncpg.DiskFullError("no space"), DatabaseRefusedError, "E-DB-002"),
        (asyncpg.QueryCanceledError("statement timeout"), DatabaseBusyError, "E-DB-003"),
        (asyncpg.LockNotAvailableError("lock timeout"), DatabaseBusyError, "E-DB-003"),
    ],
)
def test_each_member_of_the_family_has_its_typed_retryable_error(
    error: BaseException, expected: type[DatabaseUnavailableError], code: str
) -> None:
    assert isinstance(error, CONNECTION_ERRORS)
    typed = unavailable(error, "a write")
    assert type(typed) is expected and typed.code == code
    assert typed.retryable and typed.http_status == 503 and typed.retry_after_s


def test_a_row_level_security_refusal_is_not_an_outage() -> None:
    policy = asyncpg.InsufficientPrivilegeError(RLS)
    assert refused_by_policy(policy)
    assert not refused_by_policy(asyncpg.InsufficientPrivilegeError("permission denied"))
    with pytest.raises(asyncpg.InsufficientPrivilegeError), unavailable_on_connection_errors("w"):
        raise policy
    with pytest.raises(DatabaseRefusedError), unavailable_on_connection_errors("w"):
        raise asyncpg.InsufficientPrivilegeError("permission denied for table awooop_events")


@pytest.mark.parametrize(
    "conflict",
    [asyncpg.DeadlockDetectedError("deadlock detected"), asyncpg.SerializationError("could not")],
)
def test_a_conflict_past_its_retries_is_the_store_busy_for_a_runtime_call_only(
    conflict: BaseException,
) -> None:
    """A handler's runtime call gives the attempt back (E-DB-003); a producer's caller, who
    owns the transaction and retries it, gets Postgres' own error."""
    with pytest.raises(DatabaseBusyError) as busy, unavailable_on_store_errors("a journal write"):
        raise conflict
    assert busy.value.__cause__ is conflict and infrastructure_failure(busy.value)
    with pytest.raises(type(conflict)), unavailable_on_connection_errors("the producer's write"):
        raise conflict
    with pytest.raises(DatabaseUnavailableError), unavailable_on_store_errors("a journal write"):
        raise ConnectionResetError()
