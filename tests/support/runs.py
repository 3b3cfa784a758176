"""Creating runs the way ingest does (create_run in a tenant transaction) and reading them."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter, defaultdict
from typing import Any

from awooop.core.db import Database
from awooop.core.events import (
    RunCreated,
    RunFailed,
    StepCompleted,
    decode_event,
    run_stream_id,
)
from awooop.eventlog import eventlog
from awooop.eventlog.run_reads import LOCK_MANY
from awooop.eventlog.runs import apply_and_store_many, create_run
from awooop.eventlog.state import RunState, row_to_state
from awooop.runs import leases, run_rows


async def create_runs(
    db: Database,
    project: str,
    count: int = 1,
    *,
    max_attempts: int = 3,
    payload: Any = None,
    per_transaction: int = 200,
    contract: str | None = None,
) -> list[uuid.UUID]:
    run_ids = [uuid.uuid4() for _ in range(count)]
    for start in range(0, count, per_transaction):
        async with db.tenant(project) as conn:
            now = await conn.fetchval("SELECT now()")
            for run_id in run_ids[start : start + per_transaction]:
                await create_run(
                    conn,
                    RunCreated(
                        at=now,
                        run_id=run_id,
                        project_id=project,
                        channel_type="api",
                        provider_event_id=str(run_id),
                        input={"text": "hello"} if payload is None else payload,
                        max_attempts=max_attempts,
                        contract_id=contract,
                    ),
                )
    return run_ids


async def fence_cases(
    db: Database, project: str
) -> tuple[uuid.UUID, uuid.UUID, uuid.UUID, uuid.UUID]:
    """Four runs claimed by worker "w1" (attempt 1), for a fenced statement's refusals: one it
    still holds, one another worker took since ("w2", attempt 2), one whose lease expired and
    one an operator cancelled."""
    mine, stolen, expired, cancelled = await create_runs(db, project, 4)
    await db.in_run_statement(lambda c: leases.claim_many(c, [mine, stolen, cancelled], "w1", 30))
    await db.in_run_statement(lambda c: leases.claim_many(c, [expired], "w1", 0.001))
    async with db.platform_writes() as conn:
        await conn.execute(
            "UPDATE awooop_run_state SET worker_id = 'w2', attempt_count = 2 WHERE run_id = $1",
            stolen,
        )
        await conn.execute(
            "UPDATE awooop_run_state SET status = 'CANCELLED' WHERE run_id = $1", cancelled
        )
    await asyncio.sleep(0.01)  # the 1 ms lease of "expired" runs out
    return mine, stolen, expired, cancelled


async def journaled_by_a_dead_worker(
    db: Database, project: str, step: str, result: Any
) -> uuid.UUID:
    """A run whose attempt 1 (worker "dead") journaled ``step`` with ``result`` and died: its
    lease is made to have run out by the database's clock once the step is written, so a
    slow machine cannot let it run out before the write (which it would refuse)."""
    [run_id] = await create_runs(db, project, payload={})
    assert await db.in_tenant(project, lambda c: leases.claim(c, run_id, "dead", 30)) is not None
    await db.in_tenant(
        project,
        lambda c: leases.fenced_record(
            c,
            run_id,
            "dead",
            1,
            lambda _s, now: StepCompleted(
                at=now, worker_id="dead", attempt=1, step=step, result=result
            ),
        ),
    )
    async with db.platform_writes() as conn:
        await conn.execute(
            "UPDATE awooop_run_state SET lease_until = now() - interval '1 second' "
            "WHERE run_id = $1",
            run_id,
        )
    return run_id


async def create_failed_runs(
    db: Database, project: str, count: int, *, per_transaction: int = 500
) -> list[uuid.UUID]:
    """``count`` FAILED runs: created as ingest does, then failed by the platform in batches
    (one ``apply_and_store_many`` per transaction, the write path of batches)."""
    run_ids = await create_runs(db, project, count, per_transaction=per_transaction)
    for start in range(0, count, per_transaction):
        async with db.tenant(project) as conn:
            rows = await conn.fetch(LOCK_MANY, run_ids[start : start + per_transaction])
            await apply_and_store_many(
                conn,
                [
                    (
                        row_to_state(r),
                        RunFailed(at=r["db_now"], reason="the handler raised", code="E-TEST-001"),
                    )
                    for r in rows
                ],
            )
    return run_ids


async def all_finished(db: Database, run_ids: list[uuid.UUID]) -> bool:
    """Whether every run of ``run_ids`` is COMPLETED, FAILED or CANCELLED."""
    async with db.platform() as conn:
        n = await conn.fetchval(
            "SELECT count(*) FROM awooop_run_state WHERE run_id = ANY($1) "
            "AND status IN ('COMPLETED', 'FAILED', 'CANCELLED')",
            run_ids,
        )
    return bool(n == len(run_ids))


async def has_status(db: Database, project: str, run_id: uuid.UUID, status: str) -> bool:
    """Whether run ``run_id`` of ``project`` is in ``status`` now (for ``eventually``)."""
    return (await load(db, project, run_id)).status == status


async def load(db: Database, project: str, run_id: uuid.UUID) -> RunState:
    async with db.tenant(project) as conn:
        state = await run_rows.load(conn, run_id)
    assert state is not None
    return state


async def event_types(db: Database, project: str, run_id: uuid.UUID) -> list[str]:
    async with db.tenant(project) as conn:
        events = await eventlog.read_stream(conn, run_stream_id(run_id))
    return [e.event_type for e in events]


async def events_of(db: Database, project: str, run_id: uuid.UUID) -> list[Any]:
    async with db.tenant(project) as conn:
        events = await eventlog.read_stream(conn, run_stream_id(run_id))
    return [e.decode() for e in events]


async def count_events(db: Database, event_type: str) -> Counter[str]:
    """How many events of ``event_type`` each run stream has (platform role)."""
    async with db.platform() as conn:
        rows = await conn.fetch(
            "SELECT stream_id, count(*) AS n FROM awooop_events WHERE event_type = $1 "
            "GROUP BY stream_id",
            event_type,
        )
    return Counter({r["stream_id"]: r["n"] for r in rows})


async def statuses(db: Database) -> Counter[str]:
    async with db.platform() as conn:
        rows = await conn.fetch("SELECT status, count(*) AS n FROM awooop_run_state GROUP BY 1")
    return Counter({r["status"]: r["n"] for r in rows})


async def all_histories(db: Database) -> dict[str, list[Any]]:
    """Every run's events, decoded, in version order (one query)."""
    async with db.platform_writes() as conn:
        rows = await conn.fetch(
            "SELECT stream_id, data::text AS data FROM awooop_events "
            "WHERE stream_id LIKE 'run-%' ORDER BY stream_id, version"
        )
    found: dict[str, list[Any]] = defaultdict(list)
    for row in rows:
        found[row["stream_id"]].append(decode_event(row["data"]))
    return found


def check_single_holder(history: list[Any]) -> None:
    """Every attempt-scoped event is written by the attempt that holds the lease, and a new
    claim only follows a release of the previous one (no run held by two workers)."""
    holder: tuple[str, int] | None = None
    for event in history:
        name = type(event).__name__
        if name == "RunClaimed":
            assert holder is None, f"claimed while held by {holder}"
            holder = (event.worker_id, event.attempt)
        elif name in ("RunRequeued", "LeaseReleased", "ApprovalRequested"):
            holder = None
        elif getattr(event, "worker_id", None) is not None:
            assert (event.worker_id, event.attempt) == holder, f"{name} from a non-holder"
            if name in ("RunCompleted", "RunFailed"):
                holder = None
