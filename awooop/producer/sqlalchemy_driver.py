"""SQLAlchemy sessions and connections (``awooop[sqlalchemy]``): the producer runs on the
driver connection under them, inside the transaction the session or connection has begun.

Dialects: ``postgresql+psycopg`` (sync and async) and ``postgresql+asyncpg`` (async). The
asyncpg dialect begins its transaction at its first statement: when the caller has run none
yet, the producer runs ``SELECT 1`` through SQLAlchemy first, so that the transaction
SQLAlchemy commits is the one the producer writes in. Any other dialect is refused with
E-INGEST-005, naming those.
"""

from __future__ import annotations

from typing import Any

import asyncpg
from sqlalchemy.engine import Connection as SyncConnection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import Session

from awooop.core.errors import ProducerConnectionError, ProducerTransactionError
from awooop.producer.bound import Bound, asyncpg_bound

HINT = "begin the transaction first (session.begin(), engine.begin() or conn.begin())"


def refused(dialect: Any) -> ProducerConnectionError:
    return ProducerConnectionError(
        f"SQLAlchemy's {dialect.name}+{dialect.driver} dialect: the producer takes "
        "postgresql+psycopg (sync or async; pip install 'awooop[psycopg]') or "
        "postgresql+asyncpg (async)"
    )


async def bind_async(target: object) -> Bound | None:
    """An AsyncSession or AsyncConnection bound, or None when ``target`` is neither."""
    if isinstance(target, AsyncSession):
        conn = await target.connection()
    elif isinstance(target, AsyncConnection):
        conn = target
    else:
        return None
    if not conn.in_transaction():
        raise ProducerTransactionError(f"the producer needs an open transaction: {HINT}")
    driver = (await conn.get_raw_connection()).driver_connection
    if isinstance(driver, asyncpg.Connection):
        if not driver.is_in_transaction():
            await conn.exec_driver_sql("SELECT 1")
        return asyncpg_bound(driver)
    if is_psycopg(driver):
        from awooop.producer import psycopg_driver

        return psycopg_driver.bound_async(driver, HINT)
    raise refused(conn.dialect)


def bind_sync(target: object) -> Bound | None:
    """A Session or Connection bound, or None when ``target`` is neither."""
    if isinstance(target, Session):
        conn = target.connection()
    elif isinstance(target, SyncConnection):
        conn = target
    else:
        return None
    driver = conn.connection.driver_connection
    if not is_psycopg(driver):
        raise refused(conn.dialect)
    from awooop.producer import psycopg_driver

    bound = psycopg_driver.bound_sync(driver, HINT)
    return bound if conn.in_transaction() else Bound(bound.conn, bound.owner, False, HINT)


def is_psycopg(driver: object) -> bool:
    return type(driver).__module__.split(".")[0] == "psycopg"


def is_async_only(target: object) -> bool:
    return isinstance(target, AsyncSession | AsyncConnection)


def is_sync_only(target: object) -> bool:
    return isinstance(target, Session | SyncConnection)
