"""Postgres connections for tests that start many processes: pools sized to what the server
has free, and a clear failure when it has too little (instead of "too many clients" from
whichever process connects last).

Free = ``max_connections - superuser_reserved_connections`` - the client connections open now
(other users' included, the count's own excluded). The tests connect as a superuser, who may
also take the reserved slots: those stay as slack for other clients that connect meanwhile.
"""

from __future__ import annotations

import asyncio
import time

import asyncpg
import msgspec
import pytest

from awooop.commands.worker import pool_size, worker_connections
from awooop.core.config import Settings

FREE_CONNECTIONS = """
SELECT current_setting('max_connections')::int
     - current_setting('superuser_reserved_connections')::int
     - count(*) FILTER (WHERE backend_type = 'client backend' AND pid <> pg_backend_pid())::int
FROM pg_stat_activity
"""

# What the test process's own pools may open beyond what they hold when counted: its db
# fixture holds a tenant and a platform connection and reads with one of each at a time.
HEADROOM = 2


async def free_connections(database_url: str) -> int:
    conn = await asyncpg.connect(database_url)
    try:
        free: int = await conn.fetchval(FREE_CONNECTIONS)
    finally:
        await conn.close()
    return free


async def fit_workers(
    settings: Settings,
    processes: int,
    *,
    concurrency: int,
    others: int = 0,
    within_s: float = 60.0,
) -> Settings:
    """``settings`` for ``processes`` worker processes of ``concurrency`` each, plus ``others``
    connections of other processes the test starts (a relay holds 1): the largest role pool
    (``AWOOOP_DB_POOL_SIZE``, up to the worker's own choice) with which they all fit in the
    server's free connections, and one pointer-check connection each (these tests' handlers
    make no model calls). When not even pools of one connection fit, waits up to
    ``within_s`` for other clients (another test run's peak) to free some, then fails the
    test saying what it needs."""
    narrow = msgspec.structs.replace(settings, pointer_check_connections=1)
    deadline = time.monotonic() + within_s
    while True:
        free = await free_connections(settings.database_url)
        for size in range(pool_size(concurrency), 0, -1):
            sized = msgspec.structs.replace(narrow, db_pool_size=size)
            needed = processes * worker_connections(sized, concurrency) + others + HEADROOM
            if needed <= free:
                return sized
        if time.monotonic() > deadline:
            pytest.fail(
                f"{processes} worker processes need {needed} free Postgres connections, the "
                f"server has {free} (max_connections - superuser_reserved_connections - "
                f"connections in use; waited {within_s:.0f} s)",
                pytrace=False,
            )
        await asyncio.sleep(0.5)
