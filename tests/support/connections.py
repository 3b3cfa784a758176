"""Worker pools for tests that start many worker processes: sized to fit the connections the
test reserved from the suite's budget (tests/support/budget.py), with a clear failure when not
even pools of one connection fit (instead of "too many clients" from whichever process connects
last)."""

from __future__ import annotations

import msgspec
import pytest

from awooop.commands.worker import pool_size, worker_connections
from awooop.core.config import Settings

# What the test process's own pools may open beyond what they hold when counted: its db
# fixture holds a tenant and a platform connection and reads with one of each at a time.
HEADROOM = 2


def fit_workers(
    settings: Settings,
    processes: int,
    *,
    concurrency: int,
    granted: int,
    others: int = 0,
) -> Settings:
    """``settings`` for ``processes`` worker processes of ``concurrency`` each, plus ``others``
    connections of other processes the test starts (a relay holds 1), within the ``granted``
    connections of the test (its ``pg_connections``): the largest role pool
    (``AWOOOP_DB_POOL_SIZE``, up to the worker's own choice) with which they all fit, and one
    pointer-check connection each (these tests' handlers make no model calls)."""
    narrow = msgspec.structs.replace(settings, pointer_check_connections=1)
    for size in range(pool_size(concurrency), 0, -1):
        sized = msgspec.structs.replace(narrow, db_pool_size=size)
        needed = processes * worker_connections(sized, concurrency) + others + HEADROOM
        if needed <= granted:
            return sized
    pytest.fail(
        f"{processes} worker processes need {needed} Postgres connections, the test was granted "
        f"{granted} of the suite's budget (tests/support/budget.py)",
        pytrace=False,
    )
