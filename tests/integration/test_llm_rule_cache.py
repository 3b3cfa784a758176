"""The per-process cache of model-call flow rules (awooop.llm.flow_cache) on real Postgres: a
call within a second of another reuses its rules, concurrent misses share one read, a change
made elsewhere counts within the TTL, and a rate-limit token refused because the cached limit
was replaced is asked again with the fresh rules instead of failing."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from awooop.core.db import Connection, Database
from awooop.core.errors import FlowWaitTooLongError
from awooop.llm import flow_cache, flow_store
from awooop.llm.admission import FlowGate
from awooop.llm.client import ModelRequest
from awooop.runs import leases
from tests.support.runs import create_runs
from tests.support.waiting import eventually

P = "proj-llm-cache"


class Counting:
    """A tenant transaction of P that counts the reads it serves."""

    def __init__(self, db: Database) -> None:
        self.db, self.reads = db, 0

    async def __call__(self, fn: Callable[[Connection], Awaitable[Any]]) -> Any:
        self.reads += 1
        return await self.db.in_tenant(P, fn)


async def elsewhere(db: Database, sql: str, *args: Any) -> None:
    """A change made by another process: the statement alone, not this process's flow_store
    (which would clear this process's cache)."""
    async with db.tenant(P) as conn:
        await conn.execute(sql, *args)


async def test_rules_are_read_once_per_ttl_and_a_change_elsewhere_counts_within_it(
    db: Database,
) -> None:
    tx = Counting(db)
    rules, cached = await flow_cache.read(db, tx, P, "m")
    assert (rules.empty, cached, tx.reads) == (True, False, 1)
    # Many calls at once: one read between them, then hits.
    answers = await asyncio.gather(*(flow_cache.read(db, tx, P, "m") for _ in range(20)))
    assert tx.reads == 1 and all(r.empty for r, _ in answers)
    # Another process sets a limit: this process sees it within the TTL.
    changed_at = time.monotonic()
    await elsewhere(
        db,
        "INSERT INTO awooop_llm_rate_limits "
        "(project_id, model, limit_count, period_s, burst, tokens, set_by) "
        "VALUES ($1, '', 5, 1, 5, 5, 'other')",
        P,
    )

    async def limits() -> int:
        return len((await flow_cache.read(db, tx, P, "m"))[0].limits)

    await eventually(limits, equals=1, timeout_s=5, what="the limit set elsewhere")
    assert time.monotonic() - changed_at <= flow_cache.TTL_S + 2.0
    # A change through flow_store in this process clears the cache at once.
    async with db.tenant(P) as conn:
        await flow_store.end(conn, flow_store.LIMITS, P, "", actor="test")
    assert (await flow_cache.read(db, tx, P, "m"))[0].empty
    # fresh: always a read.
    reads = tx.reads
    await flow_cache.read(db, tx, P, "m", fresh=True)
    assert tx.reads == reads + 1


async def test_a_token_of_a_cached_limit_replaced_elsewhere_is_asked_again(db: Database) -> None:
    async with db.tenant(P) as conn:
        await flow_store.set_limit(conn, P, "", limit=100, period_s=1.0, burst=100, actor="t")
    [run_id] = await create_runs(db, P)
    async with db.tenant(P) as conn:
        await leases.claim(conn, run_id, "w", 30)
    gate = FlowGate(
        db, project_id=P, run_id=run_id, attempt=1, worker_id="w", check=lambda: None, max_wait_s=5
    )
    request = ModelRequest(model="m", prompt="a", options={})
    await gate.admit(1, request)  # the rules (limit L1) are now cached
    # Another process replaces the limit: L1 ends, L2 is in force; the cache still says L1.
    new_id = uuid.uuid4()
    await elsewhere(
        db,
        "WITH ended AS (UPDATE awooop_llm_rate_limits SET valid_to = now(), ended_by = 'other' "
        "WHERE project_id = $1 AND valid_to IS NULL RETURNING 1) "
        "INSERT INTO awooop_llm_rate_limits "
        "(limit_id, project_id, model, limit_count, period_s, burst, tokens, set_by) "
        "SELECT $2, $1, '', 100, 1, 100, 100, 'other' FROM (SELECT count(*) FROM ended) e",
        P,
        new_id,
    )
    rules, cached = await flow_cache.read(db, Counting(db), P, "m")
    assert cached and rules.limits[0][0] != new_id
    await gate.admit(2, request)  # L1's token is refused: asked again of L2, not E-BUDGET-002
    async with db.tenant(P) as conn:
        granted = await conn.fetchval(
            "SELECT granted FROM awooop_llm_rate_limits WHERE limit_id = $1", new_id
        )
    assert granted == 1


async def test_a_token_refused_by_one_limit_gives_the_others_back(db: Database) -> None:
    async with db.tenant(P) as conn:
        await flow_store.set_limit(conn, P, "", limit=100, period_s=1.0, burst=100, actor="t")
        # The model's own limit: its next token after this one is due in an hour.
        await flow_store.set_limit(conn, P, "m", limit=1, period_s=3600.0, burst=1, actor="t")
    [run_id] = await create_runs(db, P)
    async with db.tenant(P) as conn:
        await leases.claim(conn, run_id, "w", 30)
    gate = FlowGate(
        db, project_id=P, run_id=run_id, attempt=1, worker_id="w", check=lambda: None, max_wait_s=5
    )
    request = ModelRequest(model="m", prompt="a", options={})
    await gate.admit(1, request)
    with pytest.raises(FlowWaitTooLongError):
        await gate.admit(2, request)
    async with db.tenant(P) as conn:
        granted = dict(await conn.fetch("SELECT model, granted FROM awooop_llm_rate_limits"))
    assert granted == {"": 1, "m": 1}
