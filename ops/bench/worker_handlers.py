"""Handlers of the worker benchmark (loaded by ``awooop worker --handler worker_handlers:...``
with ``ops/bench`` on ``PYTHONPATH``)."""

from __future__ import annotations

import asyncio
import time

from awooop.worker.context import RunContext


async def noop(run: RunContext) -> None:
    """Nothing: the runtime's own cost per run."""


async def stamp(run: RunContext) -> float:
    """The wall-clock time the handler started (ingest-to-start latency)."""
    return time.time()


async def hang_first_attempt(run: RunContext) -> str:
    """Attempt 1 hangs (to be killed); later attempts finish at once (recovery time)."""
    if run.attempt == 1:
        await asyncio.sleep(3600)
    return "recovered"
