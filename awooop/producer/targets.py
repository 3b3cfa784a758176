"""Which connections the producer takes, and how each is bound (:class:`Bound`).

The async API (:mod:`awooop.producer`) takes an asyncpg connection, a
``psycopg.AsyncConnection``, or SQLAlchemy's ``AsyncSession`` / ``AsyncConnection``; the sync
API (:mod:`awooop.producer.sync`) a ``psycopg.Connection``, SQLAlchemy's ``Session`` /
``Connection`` or Django's ``connection``. The optional drivers are imported only once the
caller has imported them (a psycopg connection cannot exist before ``import psycopg``), so the
core install imports none of them. Anything else is refused with E-INGEST-005 naming what is
taken.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, TypeAlias

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from awooop.core.db import Connection
from awooop.core.errors import ProducerConnectionError
from awooop.producer.bound import Bound, asyncpg_bound

if TYPE_CHECKING:
    import psycopg
    from sqlalchemy.engine import Connection as SAConnection
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
    from sqlalchemy.orm import Session

    AsyncTarget: TypeAlias = (
        Connection | psycopg.AsyncConnection[Any] | AsyncSession | AsyncConnection | Bound
    )
    SyncTarget: TypeAlias = psycopg.Connection[Any] | Session | SAConnection | Any
else:
    AsyncTarget = Any
    SyncTarget = Any

ASYNC_TAKES = (
    "awooop.producer takes a Database, an asyncpg connection, a psycopg AsyncConnection, or a "
    "SQLAlchemy AsyncSession or AsyncConnection"
)
SYNC_TAKES = (
    "awooop.producer.sync takes a psycopg Connection, a SQLAlchemy Session or Connection "
    "(postgresql+psycopg), or Django's connection"
)


async def bind(target: object) -> Bound:
    """``target`` of the async API, bound."""
    if isinstance(target, Bound):
        return target
    if isinstance(target, asyncpg.Connection | PoolConnectionProxy):
        return asyncpg_bound(target)
    if "psycopg" in sys.modules:
        import psycopg

        from awooop.producer import psycopg_driver

        if isinstance(target, psycopg.AsyncConnection):
            return psycopg_driver.bound_async(target)
    if "sqlalchemy" in sys.modules:
        from awooop.producer import sqlalchemy_driver

        bound = await sqlalchemy_driver.bind_async(target)
        if bound is not None:
            return bound
    raise ProducerConnectionError(f"{ASYNC_TAKES}, not {_described(target, sync=True)}")


def bind_sync(target: object) -> Bound:
    """``target`` of the sync API, bound."""
    if isinstance(target, Bound):
        return target
    if "psycopg" in sys.modules:
        import psycopg

        from awooop.producer import psycopg_driver

        if isinstance(target, psycopg.Connection):
            return psycopg_driver.bound_sync(target)
    if "sqlalchemy" in sys.modules:
        from awooop.producer import sqlalchemy_driver

        bound = sqlalchemy_driver.bind_sync(target)
        if bound is not None:
            return bound
    if "django" in sys.modules:
        from awooop.producer import django_driver

        if django_driver.is_django(target):
            return django_driver.bind(target)
    raise ProducerConnectionError(f"{SYNC_TAKES}, not {_described(target, sync=False)}")


def _described(target: object, *, sync: bool) -> str:
    """The refused target's type, and the other API when it belongs there."""
    name = f"{type(target).__module__}.{type(target).__qualname__}"
    if sync and _is_sync(target):
        return f"{name}: use awooop.producer.sync for a sync connection"
    if not sync and not _is_sync(target) and _is_async(target):
        return f"{name}: use awooop.producer (async) for an async connection"
    return name


def _is_sync(target: object) -> bool:
    if "psycopg" in sys.modules:
        import psycopg

        if isinstance(target, psycopg.Connection):
            return True
    if "sqlalchemy" in sys.modules:
        from awooop.producer import sqlalchemy_driver

        if sqlalchemy_driver.is_sync_only(target):
            return True
    if "django" in sys.modules:
        from awooop.producer import django_driver

        return django_driver.is_django(target)
    return False


def _is_async(target: object) -> bool:
    if isinstance(target, asyncpg.Connection | PoolConnectionProxy):
        return True
    if "psycopg" in sys.modules:
        import psycopg

        if isinstance(target, psycopg.AsyncConnection):
            return True
    if "sqlalchemy" in sys.modules:
        from awooop.producer import sqlalchemy_driver

        return sqlalchemy_driver.is_async_only(target)
    return False
