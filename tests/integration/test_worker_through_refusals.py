"""A database that stops serving writes under a serving worker: nothing charged, nothing run
twice at once, no restart (R-19a).

Three faults, each for twice the worker's statement bound while a worker runs twelve runs, so
that renewals and completions meet it: an ACCESS EXCLUSIVE lock on ``awooop_run_state`` (the
worker's statements give up at their bound and the server ends them too: nothing runs late), a
read-only window with every session ended (the sessions opened during it stay read-only: the
pools drop them), and UPDATE revoked from the run pool's role. The attempts that could not
write their end are handed back uncharged once the database serves, and every run completes
once.
Checked with a side-effect recorder (each attempt ticks while its handler runs) and the log:
no two attempts of a run overlap, no lease moved backwards, no attempt charged, every run
COMPLETED exactly once, and the run state rebuilt from the log equals the live one.

``AWOOOP_REFUSAL_ROUNDS`` repeats it (default 1).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import uuid
from collections import defaultdict
from datetime import datetime

import asyncpg
import msgspec
import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.projections.registry import get
from awooop.projections.replay import replay
from awooop.worker.assembly import build_worker
from tests.support import handlers
from tests.support.runs import create_runs
from tests.support.waiting import eventually

P = "proj-lock"
RUNS = 12
LOCK_S = 6.0  # the fault's length: twice the worker's statement bound (3 s with this lease)
ROUNDS = int(os.environ.get("AWOOOP_REFUSAL_ROUNDS", "1"))

LEASES = "SELECT run_id, attempt_count, lease_until FROM awooop_run_state WHERE status = 'RUNNING'"


def attempt_spans(run_id: uuid.UUID) -> dict[int, tuple[float, float]]:
    """Each attempt's first and last recorded moment while its handler ran."""
    times: dict[int, list[float]] = defaultdict(list)
    for e in handlers.EFFECTS:
        if e["run_id"] == str(run_id):
            times[int(e["attempt"])].append(float(e["t"]))
    return {a: (min(ts), max(ts)) for a, ts in times.items()}


async def leases(owner: asyncpg.Connection) -> dict[uuid.UUID, tuple[int, datetime]]:
    return {r["run_id"]: (r["attempt_count"], r["lease_until"]) for r in await owner.fetch(LEASES)}


@pytest.fixture(autouse=True)
def clean_effects() -> None:
    handlers.EFFECTS.clear()


class Fault:
    """Start and end one way of refusing writes, on the owner's own connection."""

    def __init__(self, owner: asyncpg.Connection, kind: str) -> None:
        self.owner = owner
        self.kind = kind
        self.locking: asyncpg.transaction.Transaction | None = None

    async def start(self) -> None:
        if self.kind == "lock":
            self.locking = self.owner.transaction()
            await self.locking.start()
            await self.owner.execute("LOCK TABLE awooop_run_state IN ACCESS EXCLUSIVE MODE")
        elif self.kind == "read_only":
            name = await self.owner.fetchval("SELECT current_database()")
            await self.owner.execute(
                f'ALTER DATABASE "{name}" SET default_transaction_read_only = on'
            )
            await self.owner.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        else:
            await self.owner.execute("REVOKE UPDATE ON awooop_run_state FROM awooop_platform")

    async def end(self) -> None:
        if self.kind == "lock":
            assert self.locking is not None
            await self.locking.rollback()
        elif self.kind == "read_only":
            name = await self.owner.fetchval("SELECT current_database()")
            await self.owner.execute(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')
        else:
            await self.owner.execute("GRANT UPDATE ON awooop_run_state TO awooop_platform")


@pytest.mark.long(12)
@pytest.mark.parametrize("round_", range(ROUNDS))
@pytest.mark.parametrize("kind", ["lock", "read_only", "revoked"])
@pytest.mark.connections(12)
async def test_a_database_refusing_writes_under_a_serving_worker_charges_nothing(
    fast: Settings, database_url: str, kind: str, round_: int
) -> None:
    quick = msgspec.structs.replace(fast, lease_ttl_s=10.0, heartbeat_interval_s=0.5)
    db = await Database.open(database_url, max_size=6, run_timeout_s=quick.lease_io_timeout_s)
    owner = await asyncpg.connect(database_url)
    run_ids = await create_runs(db, P, RUNS, payload={"tick_s": 2.0})
    worker = build_worker(db=db, settings=quick, handler=handlers.ticking, concurrency=6).worker
    stop = asyncio.Event()
    serving = asyncio.create_task(worker.run(stop))
    try:
        await eventually(lambda: leases(owner), what="runs leased")
        before = await leases(owner)
        fault = Fault(owner, kind)
        await fault.start()
        await asyncio.sleep(LOCK_S)
        await fault.end()
        after = await leases(owner)
        for run_id, (attempt, until) in after.items():
            if run_id in before and before[run_id][0] == attempt:
                assert until >= before[run_id][1], (run_id, before[run_id], until)

        async def all_completed() -> bool:
            return bool(
                await owner.fetchval(
                    "SELECT count(*) = $2 FROM awooop_run_state"
                    " WHERE project_id = $1 AND status = 'COMPLETED'",
                    P,
                    RUNS,
                )
            )

        await eventually(all_completed, timeout_s=60, what="every run completed")
    finally:
        stop.set()
        await serving
        await db.close()
    try:
        completions = await owner.fetch(
            "SELECT stream_id, count(*) AS n FROM awooop_events"
            " WHERE event_type = 'RunCompleted' GROUP BY stream_id"
        )
        assert sorted(r["n"] for r in completions) == [1] * RUNS
        budgets = await owner.fetch(
            "SELECT max_attempts - attempt_count AS left FROM awooop_run_state"
            " WHERE project_id = $1",
            P,
        )
        # Whatever the lock cost an attempt was handed back uncharged: every run has its whole
        # budget of crashes left (max_attempts - 1 after its one completed attempt).
        assert {r["left"] for r in budgets} == {quick.max_attempts - 1}
        reaped = await owner.fetchval(
            "SELECT count(*) FROM awooop_events WHERE event_type IN ('RunRequeued', 'RunFailed')"
        )
        assert reaped == 0
        # The fault did cut attempts off (their completions were refused or waited past the
        # bound), and each was handed back, uncharged.
        released = await owner.fetch(
            "SELECT (data ->> 'charged')::boolean AS charged FROM awooop_events"
            " WHERE event_type = 'LeaseReleased'"
        )
        assert released and not any(r["charged"] for r in released)
    finally:
        await owner.close()
    for run_id in run_ids:
        spans = sorted(attempt_spans(run_id).items())
        for (_, (_, end)), (_, (start, _)) in itertools.pairwise(spans):
            assert end < start, (run_id, spans)  # attempts of a run never overlap
    report = await replay(database_url, get("run_state"))
    assert report.differences == 0, report.lines()
