"""The pure parts of the producer's drivers: ``$n`` statements as psycopg takes them, and
driver errors sorted by SQLSTATE into the catalog's database errors."""

from __future__ import annotations

import re

import psycopg
import pytest
from psycopg import errors as pg_errors
from psycopg._queries import PostgresQuery  # psycopg's parser, as cursors use it
from psycopg.adapt import Transformer

from awooop.core.errors import DatabaseBusyError, DatabaseRefusedError, DatabaseUnavailableError
from awooop.eventlog import queries
from awooop.producer.driver_errors import translated
from awooop.producer.placeholders import converted, statement


def test_dollar_parameters_become_named_ones_and_percent_signs_are_doubled() -> None:
    sql, params = statement(
        "SELECT $1 WHERE a LIKE 'x%' AND b = $2 OR c = $1 AND d$1 = $10", ["p", "q"]
    )
    assert sql == (
        "SELECT %(p1)s WHERE a LIKE 'x%%' AND b = %(p2)s OR c = %(p1)s AND d$1 = %(p10)s"
    )
    assert params == {"p1": "p", "p2": "q"}


def test_every_statement_of_the_log_room_converts_to_the_parameters_it_numbers() -> None:
    """psycopg's own parser takes each converted statement (it raises on a stray ``%`` or a
    name it is not given) and sends one parameter per ``$n``."""
    for name, text in queries.QUERIES.items():
        numbers = {int(n) for n in re.findall(r"\$(\d+)", text)}
        parsed = PostgresQuery(Transformer())
        parsed.convert(converted(text), {f"p{n}": None for n in numbers})
        assert len(parsed.params or []) == len(numbers), name


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (pg_errors.ReadOnlySqlTransaction("read-only"), DatabaseRefusedError),
        (pg_errors.InsufficientPrivilege("permission denied"), DatabaseRefusedError),
        (pg_errors.DiskFull("full"), DatabaseRefusedError),
        (pg_errors.QueryCanceled("statement timeout"), DatabaseBusyError),
        (pg_errors.LockNotAvailable("lock timeout"), DatabaseBusyError),
        (pg_errors.AdminShutdown("terminating"), DatabaseUnavailableError),
        (pg_errors.TooManyConnections("too many"), DatabaseUnavailableError),
        (psycopg.OperationalError("the connection is lost"), DatabaseUnavailableError),
        (pg_errors.SerializationFailure("could not serialize"), None),
        (pg_errors.UniqueViolation("duplicate"), None),
        (pg_errors.InsufficientPrivilege("new row violates row-level security policy"), None),
        (ValueError("not a driver's"), None),
    ],
)
def test_driver_errors_by_sqlstate(error: BaseException, expected: type | None) -> None:
    got = translated(error, "the write")
    assert (type(got) if got is not None else None) is expected


def test_a_djangos_wrapped_error_is_sorted_by_its_cause() -> None:
    class DjangoOperationalError(Exception):  # as django.db.utils wraps psycopg's
        pass

    wrapped = DjangoOperationalError("server closed the connection")
    wrapped.__cause__ = pg_errors.AdminShutdown("terminating")
    assert isinstance(translated(wrapped, "the write"), DatabaseUnavailableError)
