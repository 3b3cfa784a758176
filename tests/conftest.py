"""Fixtures on real services: a fresh migrated database and a private Redis key prefix per test."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import msgspec
import pytest
import redis.asyncio as aioredis
from hypothesis import settings as hypothesis_settings

from awooop.core.config import Settings, load_settings
from awooop.core.db import Database
from awooop.core.logs import configure_logging
from awooop.services import Services
from tests.support import budget, databases, properties, timings
from tests.support import services as servers

configure_logging("warning")
hypothesis_settings.load_profile(properties.PROFILE)


def served(resolve: Callable[[list[Any]], str]) -> Iterator[str]:
    """The server ``resolve`` finds (URL from the environment, the local service, else a
    container it starts onto the stack), stopped again at the end; pytest exits with code 3 when
    there is none, so CI fails rather than skips."""
    stack: list[Any] = []
    try:
        url = resolve(stack)
    except RuntimeError as exc:
        pytest.exit(str(exc), returncode=3)
    yield url
    for container in stack:
        container.stop()


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    yield from served(servers.resolve_postgres)


@pytest.fixture(scope="session")
def redis_server_url() -> Iterator[str]:
    yield from served(servers.resolve_redis)


@pytest.fixture(scope="session")
def template_name(pg_server_url: str) -> str:
    return asyncio.run(databases.ensure_template(pg_server_url))


@pytest.fixture
async def pg_connections(pg_server_url: str, request: pytest.FixtureRequest) -> AsyncIterator[int]:
    """The test server's connections this test may open at once, reserved from the suite's
    budget (tests/support/budget.py) before its database is made: ``pytest.mark.connections``
    says how many it wants, ``budget.DEFAULT`` without one; fewer when the budget is smaller."""
    marker = request.node.get_closest_marker("connections")
    share = budget.Budget(pg_server_url)
    yield await share.reserve(int(marker.args[0]) if marker else budget.DEFAULT)
    share.cancel()


@pytest.fixture
async def database_url(
    pg_server_url: str, template_name: str, pg_connections: int
) -> AsyncIterator[str]:
    name = await databases.create_test_database(pg_server_url, template_name)
    yield databases.with_database(pg_server_url, name)
    await databases.drop_database(pg_server_url, name)


@pytest.fixture
async def redis_prefix(redis_server_url: str) -> AsyncIterator[str]:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    yield prefix
    client = aioredis.Redis.from_url(redis_server_url)
    try:
        keys = [k async for k in client.scan_iter(match=f"{prefix}*", count=1000)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


@pytest.fixture
async def redis(redis_server_url: str, redis_prefix: str) -> AsyncIterator[Any]:
    """A client of the test Redis; the test's keys live under ``redis_prefix`` (which is
    ``settings.redis_key_prefix``). Redis only: a test of it alone needs no database."""
    client = aioredis.Redis.from_url(redis_server_url)
    yield client
    await client.aclose()


@pytest.fixture
def settings(database_url: str, redis_server_url: str, redis_prefix: str) -> Settings:
    return load_settings(
        environ={},
        database_url=database_url,
        redis_url=redis_server_url,
        redis_key_prefix=redis_prefix,
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "fast(variant): the timings of the `fast` fixture (tests/support/timings.py)"
    )
    config.addinivalue_line(
        "markers",
        "connections(n): the most test-server connections the test opens at once, its own and"
        " its processes' (tests/support/budget.py)",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked ``long`` first, longest first (``long(seconds)``: about how long it
    takes on a loaded CI machine, 10 if not said), the rest in their order: with several test
    processes taking one test at a time (``--maxschedchunk 1``), a long test left for the end
    would keep one process busy while the others have nothing left to do."""

    def seconds(item: pytest.Item) -> float:
        marker = item.get_closest_marker("long")
        return 0.0 if marker is None else float(marker.args[0] if marker.args else 10)

    items.sort(key=seconds, reverse=True)


@pytest.fixture
def fast(settings: Settings, request: pytest.FixtureRequest) -> Settings:
    """``settings`` with short leases, heartbeats and loop intervals; the variant is named by
    the closest ``pytest.mark.fast("...")`` (tests/support/timings.py), ``worker`` without one."""
    marker = request.node.get_closest_marker("fast")
    return timings.fast(settings, *(marker.args if marker else ()))


@pytest.fixture
async def services(settings: Settings) -> AsyncIterator[Services]:
    """The process's services (database pool of 4, Redis client, keys) on the test's database and
    Redis prefix. One pointer-check connection: no test's model gateways need more."""
    opened = await Services.open(
        msgspec.structs.replace(settings, pointer_check_connections=1), db_pool_size=4
    )
    yield opened
    await opened.close()


@pytest.fixture
async def db(settings: Settings) -> AsyncIterator[Database]:
    database = await Database.open(
        settings.database_url, max_size=10, run_timeout_s=settings.lease_io_timeout_s
    )
    yield database
    await database.close()


@pytest.fixture
def spans() -> Iterator[Any]:
    """The in-memory span exporter (tests/support/tracing.py), emptied before and after.

    Every loop iteration is sampled meanwhile (``AWOOOP_LOOP_TRACE_SAMPLE_RATIO`` = 1), so a
    test sees all spans; tests of the loop sampling set their own ratio."""
    from awooop.core.telemetry import set_loop_sample_ratio
    from tests.support.tracing import memory_exporter

    exporter = memory_exporter()
    exporter.clear()
    previous = set_loop_sample_ratio(1.0)
    try:
        yield exporter
    finally:
        set_loop_sample_ratio(previous)
        exporter.clear()


@pytest.fixture
def collector() -> Iterator[Any]:
    """A local OTLP/HTTP trace receiver (tests/support/otlp.py) on a free port."""
    from tests.support.otlp import Collector

    receiver = Collector()
    receiver.thread.start()
    yield receiver
    receiver.server.shutdown()
    receiver.server.server_close()
