"""pytest fixtures for handler tests on the real database: ``awooop_postgres``.

Load it in the project's root ``conftest.py``::

    pytest_plugins = ["awooop.testing.pytest_plugin"]

``awooop_postgres`` is a :class:`PostgresKit` on a fresh database, copied per test from a
template migrated once per session (``awooop migrate``'s migrations), on the server of
``AWOOOP_TEST_DATABASE_URL`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``; the
role must be allowed to create databases). ``await awooop_postgres.run(handler, input)``
creates a run as ingest does and runs it with an in-process worker through the worker's
polling path only (no Redis), with a :class:`~awooop.testing.FakeModel` as its model; the
run's state and events are read back from Postgres. Needs pytest-asyncio.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import msgspec
import pytest
import pytest_asyncio

from awooop.core.config import Settings, load_settings
from awooop.core.db import Connection, Database
from awooop.core.events import Event, RunCreated, run_stream_id
from awooop.core.migrate import migrate
from awooop.eventlog import eventlog
from awooop.eventlog.runs import create_run
from awooop.eventlog.state import RunState
from awooop.runs import approvals, run_rows
from awooop.runs.approvals import ApprovalTicket, Decision
from awooop.testing.fakes import FakeModel
from awooop.testing.journal import Journal
from awooop.testing.kit import Handler
from awooop.worker.runtime import Worker

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


@dataclass
class PostgresKit:
    """A handler run by a real worker on a real database (see the module doc)."""

    db: Database
    settings: Settings
    project_id: str = "test-project"
    model: FakeModel = field(default_factory=FakeModel)
    tickets: list[ApprovalTicket] = field(default_factory=list)  # the worker's notifier's

    async def _notify(self, ticket: ApprovalTicket) -> None:
        self.tickets.append(ticket)

    async def create(self, input: Any = None, *, max_attempts: int = 3) -> uuid.UUID:
        """A new PENDING run of ``input`` in :attr:`project_id`."""
        run_id = uuid.uuid4()

        async def write(conn: Connection) -> None:
            now = await conn.fetchval("SELECT now()")
            await create_run(
                conn,
                RunCreated(
                    at=now,
                    run_id=run_id,
                    project_id=self.project_id,
                    channel_type="api",
                    provider_event_id=str(run_id),
                    input=msgspec.to_builtins(input),
                    max_attempts=max_attempts,
                ),
            )

        await self.db.in_tenant(self.project_id, write)
        return run_id

    async def work(self, handler: Handler, *, max_s: float = 60.0) -> int:
        """Run everything runnable with one in-process worker (polling, no Redis) until idle;
        the number of attempts run."""
        worker = Worker(
            db=self.db,
            settings=self.settings,
            handler=handler,
            llm=self.model,
            notifier=self._notify,
            concurrency=2,
        )
        return await worker.run_until_idle(max_s=max_s)

    async def run(self, handler: Handler, input: Any = None) -> RunState:
        """Create a run of ``input``, work until idle, and return the run's state."""
        run_id = await self.create(input)
        await self.work(handler)
        return await self.state(run_id)

    async def approve(self, run_id: uuid.UUID, *, by: str = "test", actor: str = "kit") -> RunState:
        """Approve the run's open request for the person ``by``, as ``awooop runs approve
        --by`` does (the grant's ``by``; ``actor`` stands for the management token); then
        :meth:`work` again."""
        return await self._decide(run_id, Decision.APPROVED, by, actor, "")

    async def reject(
        self, run_id: uuid.UUID, *, by: str = "test", actor: str = "kit", reason: str = ""
    ) -> RunState:
        return await self._decide(run_id, Decision.REJECTED, by, actor, reason)

    async def _decide(
        self, run_id: uuid.UUID, decision: Decision, by: str, actor: str, reason: str
    ) -> RunState:
        return await self.db.in_tenant(
            self.project_id,
            lambda c: approvals.decide_as(c, run_id, decision, actor=actor, by=by, reason=reason),
        )

    async def state(self, run_id: uuid.UUID) -> RunState:
        async with self.db.tenant(self.project_id) as conn:
            found = await run_rows.load(conn, run_id)
        assert found is not None, f"no run {run_id}"
        return found

    async def journal(self, run_id: uuid.UUID) -> Journal:
        """The run's events, as a :class:`~awooop.testing.Journal` (replayable in the kit)."""
        async with self.db.tenant(self.project_id) as conn:
            stored = await eventlog.read_stream(conn, run_stream_id(run_id))
        events: list[Event] = [e.decode() for e in stored]
        return Journal(events)


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
