"""A lease renewal changes no indexed column of the run's row, so Postgres can make it a HOT
update (no new index entry in any of the table's indexes), and the expired leases are still
found through an index."""

from __future__ import annotations

import asyncpg

from awooop.core.db import Database
from awooop.eventlog import run_reads
from awooop.runs import leases
from tests.support.runs import create_runs

P = "proj-hot-leases"
# What renew_leases.sql writes.
RENEWED = ("lease_until", "heartbeat_at", "current_step", "current_step_started_at",
           "current_step_attempt")  # fmt: skip
# Each index of awooop_run_state with the columns it reads: its keys, its expressions' and its
# predicate's.
INDEXED = """
SELECT i.indexrelid::regclass::text AS name, array_agg(DISTINCT a.attname::text) AS columns
FROM pg_index i
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum > 0 AND NOT a.attisdropped
 AND (a.attnum = ANY (i.indkey)
      OR pg_get_expr(i.indexprs, i.indrelid) ~ ('\\m' || a.attname || '\\M')
      OR pg_get_expr(i.indpred, i.indrelid) ~ ('\\m' || a.attname || '\\M'))
WHERE i.indrelid = 'awooop_run_state'::regclass
GROUP BY 1
"""
HOT_IN_TRANSACTION = (
    "SELECT pg_stat_get_xact_tuples_updated(c.oid), pg_stat_get_xact_tuples_hot_updated(c.oid)"
    " FROM pg_class c WHERE c.oid = 'awooop_run_state'::regclass"
)


async def test_no_index_of_the_run_state_reads_a_column_a_renewal_writes(
    database_url: str,
) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        indexes = {r["name"]: set(r["columns"]) for r in await conn.fetch(INDEXED)}
    finally:
        await conn.close()
    # keys (run_id), predicates (status) and expressions (input, of the search index) are seen
    assert {"run_id", "status", "input"} <= set().union(*indexes.values())
    reading = {name: cols & set(RENEWED) for name, cols in indexes.items() if cols & set(RENEWED)}
    assert reading == {}


async def test_a_renewal_is_a_hot_update_and_expired_leases_are_found_by_index(
    db: Database, database_url: str
) -> None:
    runs = await create_runs(db, P, 4)
    await db.in_run_statement(lambda c: leases.claim_many(c, runs, "w1", 30))
    owner = await asyncpg.connect(database_url)
    try:
        await owner.execute("VACUUM awooop_run_state")  # room on the pages the claims filled
        async with owner.transaction():
            renewed = await leases.heartbeat(owner, "w1", dict.fromkeys(runs, 1), 60)
            updated, hot = await owner.fetchrow(HOT_IN_TRANSACTION)
        assert renewed == set(runs)
        assert (updated, hot) == (4, 4)
        # The reaper's query (and the polling path's) can read the leased runs through an
        # index, whatever the planner prefers on a table this small.
        async with owner.transaction():
            await owner.execute("SET LOCAL enable_seqscan = off")
            plan = "\n".join(
                r[0]
                for r in await owner.fetch(
                    "EXPLAIN " + run_reads.LOCK_EXPIRED_OLDEST, 10, None, None, None
                )
            )
        assert "Seq Scan on awooop_run_state" not in plan, plan
        assert "awooop_run_state" in plan
    finally:
        await owner.close()
