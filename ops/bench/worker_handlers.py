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


async def model_calls(run: RunContext) -> int:
    """``calls`` model calls (the input's, default 10) one after another: the rate-limit
    benchmark's demand."""
    calls = int(run.input.get("calls", 10)) if isinstance(run.input, dict) else 10
    for _ in range(calls):
        await run.llm("a b c", max_tokens=5)
    return calls
