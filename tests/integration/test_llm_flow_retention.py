"""Retention of model-call reservations and waits (awooop.llm.flow_retention, run by the
dedupe_expiry loop) on real Postgres: finished rows older than the retention are deleted in
batches through their partial indexes, recent and open ones stay, and a dead attempt's open
reservation of an ended period is released off its counter, uncharged."""

from __future__ import annotations

import uuid
from typing import Any

from awooop.core.db import Database
from awooop.llm import flow_retention
from awooop.runs import leases
from awooop.services import Services
from tests.integration.test_ingest_expiry import expiry_body
from tests.support.runs import create_runs

P = "proj-llm-retention"
DAY = 86400.0
RECENT = 20000  # finished an hour ago: kept


async def backlog(db: Database) -> tuple[uuid.UUID, Any]:
    """RECENT recent finished reservations and 3,000 recent waits; 8 old finished
    reservations, 4 old ended waits and an old open one; an open reservation of a live attempt
    and one of a dead attempt in a period that ended ten days ago (its counter reserves 7)."""
    [live] = await create_runs(db, P)
    async with db.tenant(P) as conn:
        await leases.claim(conn, live, "w", 60)
    async with db.platform_writes() as conn:
        await conn.execute(
            "INSERT INTO awooop_llm_reservations (run_id, attempt, seq, model, project_id, "
            "period_s, period_start, reserved, used, state, reserved_at, settled_at) "
            "SELECT gen_random_uuid(), 1, 1, '', $1, 86400, date_trunc('day', now()), 5, 5, "
            "CASE WHEN i % 10 = 0 THEN 'released' ELSE 'settled' END, "
            "now() - interval '1 hour', now() - interval '1 hour' "
            "FROM generate_series(1, $2) i",
            P,
            RECENT,
        )
        await conn.execute(
            "INSERT INTO awooop_llm_reservations (run_id, attempt, seq, model, project_id, "
            "period_s, period_start, reserved, used, state, reserved_at, settled_at) "
            "SELECT gen_random_uuid(), 1, 1, '', $1, 86400, date_trunc('day', now()), 5, 5, "
            "CASE WHEN i <= 5 THEN 'settled' ELSE 'released' END, "
            "now() - interval '10 days', now() - interval '10 days' "
            "FROM generate_series(1, 8) i",
            P,
        )
        old_period = await conn.fetchval("SELECT date_trunc('day', now() - interval '10 days')")
        await conn.execute(
            "INSERT INTO awooop_llm_budget_usage (project_id, model, period_s, period_start, "
            "used, reserved) VALUES ($1, '', 86400, $2, 40, 7)",
            P,
            old_period,
        )
        for run_id, period, amount, age in (
            (uuid.uuid4(), old_period, 7, "10 days"),  # dead: no run holds it
            (live, old_period, 3, "10 days"),  # its attempt holds its lease: kept open
        ):
            await conn.execute(
                "INSERT INTO awooop_llm_reservations (run_id, attempt, seq, model, project_id, "
                "period_s, period_start, reserved, reserved_at) "
                "VALUES ($1, 1, 1, '', $2, 86400, $3, $4, now() - $5::text::interval)",
                run_id,
                P,
                period,
                amount,
                age,
            )
        await conn.execute(
            "INSERT INTO awooop_llm_waits (run_id, project_id, attempt, reason, wait_key, "
            "since, until, ended_at) "
            "SELECT gen_random_uuid(), $1, 1, 'rate_limited', 'k', now() - d, now() - d, "
            "CASE WHEN i = 0 THEN NULL ELSE now() - d END "
            "FROM generate_series(0, 3004) i, "
            "LATERAL (SELECT CASE WHEN i <= 4 THEN interval '10 days' ELSE interval '1 hour' END"
            " AS d) x",
            P,
        )
        await conn.execute("ANALYZE awooop_llm_reservations")
        await conn.execute("ANALYZE awooop_llm_waits")
    return live, old_period


async def test_finished_rows_past_the_retention_go_in_batches_through_their_indexes(
    db: Database,
) -> None:
    live, old_period = await backlog(db)
    async with db.platform() as conn:
        plans = {
            name: "\n".join(
                r[0] for r in await conn.fetch("EXPLAIN " + sql, 7 * DAY, flow_retention.BATCH)
            )
            for name, sql in (
                ("release", flow_retention.RELEASE_DEAD),
                ("reservations", flow_retention.EXPIRE_RESERVATIONS),
                ("waits", flow_retention.EXPIRE_WAITS),
            )
        }
    assert "awooop_llm_reservations_open_idx" in plans["release"], plans["release"]
    assert "awooop_llm_reservations_finished_idx" in plans["reservations"], plans["reservations"]
    assert "awooop_llm_waits_ended_idx" in plans["waits"], plans["waits"]
    for name, text in plans.items():
        assert "Seq Scan on awooop_llm_reservations" not in text, (name, text)
        assert "Seq Scan on awooop_llm_waits" not in text, (name, text)

    done = await flow_retention.expire_once(db, 7 * DAY, batch=3)
    assert done == {"released": 1, "reservations": 8, "waits": 4}
    async with db.platform() as conn:
        states = dict(
            await conn.fetch("SELECT state, count(*) FROM awooop_llm_reservations GROUP BY 1")
        )
        counter = await conn.fetchrow(
            "SELECT used, reserved FROM awooop_llm_budget_usage WHERE period_start = $1",
            old_period,
        )
        still_open = await conn.fetchval(
            "SELECT run_id FROM awooop_llm_reservations WHERE state = 'reserved'"
        )
        waits = await conn.fetchval("SELECT count(*) FROM awooop_llm_waits")
    # The recent ones stay (a tenth released), the dead one is released now (kept for its own
    # retention), the live attempt's stays open.
    assert states == {"settled": 18000, "released": 2001, "reserved": 1}
    assert still_open == live
    assert (counter["used"], counter["reserved"]) == (40, 0)
    assert waits == 3001  # the recent ended ones and the open one
    # Nothing left to do: a second pass changes nothing.
    assert await flow_retention.expire_once(db, 7 * DAY) == {
        "released": 0,
        "reservations": 0,
        "waits": 0,
    }


async def test_the_dedupe_expiry_loop_runs_the_retention(services: Services) -> None:
    assert services.settings.llm_flow_retention_s == 7 * DAY  # the default
    await backlog(services.db)
    await expiry_body(services)
    async with services.db.platform() as conn:
        reservations = await conn.fetchval("SELECT count(*) FROM awooop_llm_reservations")
        waits = await conn.fetchval("SELECT count(*) FROM awooop_llm_waits")
    assert (reservations, waits) == (RECENT + 2, 3001)
