"""pytest fixtures for handler tests on the real database: ``awooop_postgres``.

Load it in the project's root ``conftest.py``::

    pytest_plugins = ["awooop.testing.pytest_plugin"]

``awooop_postgres`` is a :class:`~awooop.testing.postgres.PostgresKit` on a fresh database,
copied per test from a template migrated once per session (``awooop migrate``'s migrations),
on the server of ``AWOOOP_TEST_DATABASE_URL`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``; the role must be allowed to create
databases). ``await awooop_postgres.run(handler, input)`` creates a run as ingest does and
runs it with an in-process worker through the worker's polling path only (no Redis), with a
:class:`~awooop.testing.FakeModel` as its model; the run's state and events are read back from
Postgres. Needs pytest-asyncio.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
import pytest_asyncio

from awooop.core.config import load_settings
from awooop.core.db import Database
from awooop.core.migrate import migrate
from awooop.testing.postgres import PostgresKit

SERVER_ENV = "AWOOOP_TEST_DATABASE_URL"
DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"


def _with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


async def _admin(server: str, statement: str) -> None:
    conn = await asyncpg.connect(_with_database(server, "postgres"))
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def awooop_template_database() -> Iterator[tuple[str, str]]:
    """(server URL, template name): migrated once for the session, dropped at its end."""
    import asyncio

    server = os.environ.get(SERVER_ENV, DEFAULT_SERVER)
    name = f"awooop_kit_tpl_{uuid.uuid4().hex[:10]}"
    asyncio.run(migrate(_with_database(server, name)))
    yield server, name
    asyncio.run(_admin(server, f'DROP DATABASE IF EXISTS "{name}"'))


@pytest_asyncio.fixture
async def awooop_postgres(
    awooop_template_database: tuple[str, str],
) -> AsyncIterator[PostgresKit]:
    server, template = awooop_template_database
    name = f"awooop_kit_{uuid.uuid4().hex[:12]}"
    await _admin(server, f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    url = _with_database(server, name)
    settings = load_settings(environ={}, database_url=url)
    db = await Database.open(url, max_size=6, run_timeout_s=settings.lease_io_timeout_s)
    try:
        yield PostgresKit(db=db, settings=settings)
    finally:
        await db.close()
        await _admin(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
