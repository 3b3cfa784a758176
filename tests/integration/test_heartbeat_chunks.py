"""The heartbeat renews a worker's leases in statements of RENEWAL_CHUNK leases, in run id
order, each confirming its own (awooop/worker/heartbeat.py): thousands of leases in one
statement outlasted the statement timeout and then none was renewed. A chunk that fails
leaves the others renewed, and the round still reports the failure. These are the runs' own
renewals: every lease every interval with worker sessions off (the settings here), and the runs
whose own lease is due under a session."""

from __future__ import annotations

import uuid
from typing import Any

import msgspec
import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import DatabaseUnavailableError
from awooop.worker import heartbeat
from awooop.worker.runtime import Worker
from tests.support.runs import load
from tests.support.workers import holding_worker

P = "proj-beat"


async def holding(db: Database, settings: Settings, runs: int) -> tuple[Worker, list[uuid.UUID]]:
    """A worker whose executor holds ``runs`` claimed runs, renewing each lease on its own
    (sessions off)."""
    settings = msgspec.structs.replace(settings, session_leases=False)
    return await holding_worker(db, settings, P, runs)


async def lease_ends(db: Database, run_ids: list[uuid.UUID]) -> list[Any]:
    return [(await load(db, P, r)).lease_until for r in run_ids]


async def test_leases_are_renewed_in_chunks_in_run_id_order(
    db: Database, fast: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(heartbeat, "RENEWAL_CHUNK", 2)
    w, run_ids = await holding(db, fast, 5)
    sent: list[list[uuid.UUID]] = []
    renew = w.heartbeat.statements.heartbeat

    async def counted(worker_id: str, held: dict[uuid.UUID, int], *rest: Any) -> Any:
        sent.append(list(held))
        return await renew(worker_id, held, *rest)

    monkeypatch.setattr(w.heartbeat.statements, "heartbeat", counted)
    before = await lease_ends(db, run_ids)
    assert await w.heartbeat.beat() == set(run_ids)
    assert sent == [run_ids[0:2], run_ids[2:4], run_ids[4:5]]
    after = await lease_ends(db, run_ids)
    assert all(a > b for a, b in zip(after, before, strict=True))


async def test_a_failed_chunk_leaves_the_others_renewed_and_the_round_reports_it(
    db: Database, fast: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(heartbeat, "RENEWAL_CHUNK", 2)
    w, run_ids = await holding(db, fast, 5)
    renew = w.heartbeat.statements.heartbeat
    calls = 0

    async def second_times_out(worker_id: str, held: dict[uuid.UUID, int], *rest: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:  # as a statement over the statement timeout answers
            raise DatabaseUnavailableError("a database statement did not answer within 9 s")
        return await renew(worker_id, held, *rest)

    monkeypatch.setattr(w.heartbeat.statements, "heartbeat", second_times_out)
    before = await lease_ends(db, run_ids)
    deadlines = {r: w.executor.attempts[r].lease_deadline for r in run_ids}
    with pytest.raises(DatabaseUnavailableError):
        await w.heartbeat.beat()
    after = await lease_ends(db, run_ids)
    moved = [a > b for a, b in zip(after, before, strict=True)]
    assert moved == [True, True, False, False, True]
    held = w.executor.attempts
    assert [held[r].lease_deadline > deadlines[r] for r in run_ids] == moved
    assert all(held[r].stop_reason is None for r in run_ids)  # the failed chunk is not lost
