"""A worker's slots count its claims under way, not only its attempts begun: while a stream
delivery's claim waits for Postgres, the polling path (and the worker's own timers) see that
slot as taken, so the worker never runs more attempts than its concurrency."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from awooop.core.batching import Batcher
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.worker import claims
from awooop.worker.assembly import build_worker
from awooop.worker.claims import Claimed
from tests.support import handlers
from tests.support.runs import all_finished, create_runs
from tests.support.waiting import eventually

P = "proj-slots"


async def test_a_claim_under_way_holds_its_slot_against_polling(
    db: Database, fast: Settings
) -> None:
    worker = build_worker(db=db, settings=fast, handler=handlers.journaled, concurrency=2).worker
    answer = asyncio.Event()

    async def slow_claim(
        _project: str, items: list[tuple[uuid.UUID, dict[str, Any]]]
    ) -> list[Claimed | BaseException]:
        await answer.wait()  # Postgres is slow to answer the stream's claim
        return await claims.claim_announced(db, fast, worker.worker_id, items, worker.routes)

    worker.claims = Batcher(slow_claim)
    announced, *waiting = await create_runs(db, P, 4)
    taking = asyncio.create_task(worker.take(announced, P, path="stream"))
    await eventually(lambda: worker.claiming == 1, what="the stream's claim under way")
    assert worker.free_slots() == 1
    polled = await worker.poll_once(0.0)
    assert polled == 1 and worker.free_slots() == 0  # one slot left for polling, not two
    assert await worker.poll_once(0.0) == 0
    answer.set()
    await asyncio.wait_for(taking, 30)
    assert worker.claiming == 0
    await worker.run_until_idle(max_s=30)
    assert await all_finished(db, [announced, *waiting])
