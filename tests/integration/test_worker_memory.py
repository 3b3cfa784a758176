"""What a worker keeps of a run once it has ended: nothing that only the cyclic collector could
free. A run's objects (its attempt, context, model calls, output buffer, handler task) form no
reference cycle, so reference counting frees them as the run ends; in a cycle they outlived
their run until a full collection (a run in flight survives the young ones), and a worker held
the runs that had ended as well as those in flight."""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.llm.gateway import ModelGateway
from awooop.worker.attempts import Attempt
from awooop.worker.context import RunContext
from awooop.worker.output import OutputBuffer
from tests.integration.test_model_calls import open_gateway
from tests.integration.test_worker_streams import relay_running
from tests.support.runs import all_finished, create_runs
from tests.support.waiting import eventually
from tests.support.workers import serving_worker, streaming_worker

P = "proj-mem"
RUNS = 20
PER_RUN = (Attempt, RunContext, OutputBuffer)

pytestmark = pytest.mark.fast("streams")


async def three_steps(run: RunContext) -> int:
    for i in range(3):
        await run.llm_step(f"s{i}", "a b c", max_tokens=5)
    return 3


@contextmanager
def cyclic_garbage() -> Iterator[Counter[str]]:
    """The objects that only the cyclic collector frees, made in the block, by type."""
    found: Counter[str] = Counter()
    gc.collect()
    gc.disable()
    try:
        yield found
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        found.update(type(o).__qualname__ for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


@pytest.mark.connections(16)
async def test_runs_that_ended_leave_no_cycle_behind(
    db: Database, fast: Settings, redis: Any
) -> None:
    gateway, services = await open_gateway(fast, db)
    gw: ModelGateway = gateway
    worker, intake = streaming_worker(db, fast, redis, handler=three_steps, llm=gw)
    try:
        async with relay_running(fast, redis), serving_worker(worker, intake):
            with cyclic_garbage() as garbage:
                run_ids = await create_runs(db, P, RUNS, payload={})
                await eventually(
                    lambda: all_finished(db, run_ids), timeout_s=60, what="the runs finished"
                )
    finally:
        await gw.close()
        await services.redis.aclose()
    assert sum(worker.executor.finished.values()) == RUNS
    assert {t: garbage[t.__qualname__] for t in PER_RUN} == dict.fromkeys(PER_RUN, 0)
