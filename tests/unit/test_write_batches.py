"""A burst of fenced writes (thousands of runs ending a step at once) is flushed in batches of
at most WRITE_BATCH, at most FLUSHES_PER_PROJECT at a time: what a worker holds of the writes
being flushed (their rows, states and statements) stays bounded whatever the burst."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime
from typing import Any, cast

from awooop.core.events import Event
from awooop.eventlog.state import RunState
from awooop.runs import leases
from awooop.worker.last_writes import FLUSHES_PER_PROJECT, WRITE_BATCH, LastWrites

BURST = 1000


class Statements:
    """The run statements, counting the writes each flush holds and the flushes at once."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.running = self.most_running = 0

    async def fenced_record_many(self, writes: list[leases.FencedWrite]) -> list[Any]:
        return await self._flush(writes)

    async def complete_many(self, completions: list[leases.Completion]) -> list[Any]:
        return await self._flush(completions)

    async def _flush(self, items: list[Any]) -> list[Any]:
        self.sizes.append(len(items))
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        await asyncio.sleep(0.005)
        self.running -= 1
        return [cast(RunState, object()) for _ in items]


def nothing(_state: RunState, _now: datetime) -> Event:
    raise AssertionError("not made: the flush is counted only")


async def test_a_burst_of_writes_is_flushed_in_bounded_batches() -> None:
    writes = LastWrites(db=cast(Any, None), worker_id="w")
    statements = Statements()
    writes.statements = cast(leases.RunStatements, statements)
    burst = [leases.FencedWrite(uuid.uuid4(), "w", 1, nothing) for _ in range(BURST)]
    await asyncio.gather(*(writes.write("p", w) for w in burst))
    assert sum(statements.sizes) == BURST
    assert max(statements.sizes) == WRITE_BATCH < BURST
    assert statements.most_running <= FLUSHES_PER_PROJECT


async def test_a_burst_of_completions_is_flushed_in_bounded_batches() -> None:
    writes = LastWrites(db=cast(Any, None), worker_id="w")
    statements = Statements()
    writes.statements = cast(leases.RunStatements, statements)
    burst = [leases.Completion(uuid.uuid4(), "w", 1, None, {}) for _ in range(BURST)]
    await asyncio.gather(*(writes.completions.submit("p", c) for c in burst))
    assert sum(statements.sizes) == BURST
    assert max(statements.sizes) == WRITE_BATCH
    assert statements.most_running <= FLUSHES_PER_PROJECT
