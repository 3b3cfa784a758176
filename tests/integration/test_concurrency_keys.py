"""Concurrency keys on real Postgres: intake gives each run its key and maximum (and refuses a
full key, on HTTP and in the producer library, writing nothing); the claim statements never
admit more runs of a key than its maximum, however many claims race; a slot is freed by the
lease's end, so a dead holder's slot comes back once its lease expires; a refused run is
left PENDING and taken by the polling path once a slot frees; blocked_on says why."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from awooop import producer
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import ConcurrencyDepthError
from awooop.core.events import run_stream_id
from awooop.ingest import depth
from awooop.runs import concurrency, leases
from awooop.runs.blocked import Reason, ShardFacts, decide
from awooop.runs.blocked_facts import run_facts
from awooop.runs.pause_rules import Scope
from tests.support.ingest import Ingest, ingest_app
from tests.support.runs import create_runs
from tests.support.webhooks import PROJECT, fresh

P = PROJECT
KEY = "channel:api/cust-a"


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[Ingest]:
    async with ingest_app(settings) as opened:
        yield opened


async def limit(db: Database, key_expr: str, max_expr: str, **extra: int | None) -> None:
    await db.in_tenant(
        P,
        lambda c: concurrency.set_limit(
            c,
            P,
            Scope.CHANNEL,
            "api",
            key_expr=key_expr,
            max_expr=max_expr,
            global_max=extra.get("global_max"),
            depth_cap=extra.get("depth_cap"),
            actor="test",
        ),
    )


async def submit(db: Database, settings: Settings, customer: str, tier: str = "free") -> uuid.UUID:
    event = producer.ChannelEvent("api", uuid.uuid4().hex, {"customer": customer, "tier": tier})
    return (await producer.submit(db, P, event, settings=settings)).run_id


async def executing(db: Database, key: str = KEY) -> int:
    return int(
        await db.in_platform(
            lambda c: c.fetchval(
                "SELECT count(*) FROM awooop_run_state WHERE concurrency_key = $1"
                " AND status IN ('RUNNING', 'WAITING_TOOL') AND lease_until > now()",
                key,
            )
        )
    )


async def runs_of(db: Database) -> int:
    return int(await db.in_platform(lambda c: c.fetchval("SELECT count(*) FROM awooop_run_state")))


async def test_intake_gives_each_run_its_key_and_maximum(db: Database, settings: Settings) -> None:
    await limit(db, "input.customer", 'input.tier == "premium" ? 3 : 2')
    free = await submit(db, settings, "cust-a")
    premium = await submit(db, settings, "cust-b", "premium")
    anonymous = producer.ChannelEvent("api", "anon", {"tier": "free"})
    nobody = (await producer.submit(db, P, anonymous, settings=settings)).run_id
    rows = await db.in_platform(
        lambda c: c.fetch(
            "SELECT run_id, concurrency_scope, concurrency_key, concurrency_max"
            " FROM awooop_run_state"
        )
    )
    got = {r["run_id"]: tuple(r)[1:] for r in rows}
    assert got == {
        free: ("channel:api", KEY, 2),
        premium: ("channel:api", "channel:api/cust-b", 3),
        nobody: ("channel:api", "channel:api/(none)", 2),
    }
    events = await db.in_platform(
        lambda c: c.fetchval(
            "SELECT data ->> 'concurrency_key' FROM awooop_events WHERE event_type = 'RunCreated'"
            " AND stream_id = $1",
            run_stream_id(free),
        )
    )
    assert events == KEY  # replay folds the same key from the event


async def test_a_full_key_is_refused_at_intake_and_nothing_is_written(
    db: Database, settings: Settings, api: Ingest
) -> None:
    await limit(db, "input.customer", "1", depth_cap=2)
    await submit(db, settings, "cust-a")
    await submit(db, settings, "cust-a")
    before = await runs_of(db)
    with pytest.raises(ConcurrencyDepthError) as refused:
        await submit(db, settings, "cust-a")
    assert refused.value.code == "E-CONCURRENCY-001"
    assert await runs_of(db) == before
    await submit(db, settings, "cust-b")  # another key is not held back
    # HTTP: the api channel's requests (the same limit) share the key "(none)"
    first = await api.post(fresh("api"))
    second = await api.post(fresh("api"))
    third = await api.post(fresh("api"))
    assert (first.status_code, second.status_code) == (202, 202), second.text
    assert third.status_code == 429 and third.json()["code"] == "E-CONCURRENCY-001"
    assert third.headers["Retry-After"] == "5"


@pytest.mark.connections(11)
async def test_racing_claims_never_admit_more_than_the_key_allows(
    db: Database, settings: Settings
) -> None:
    await limit(db, "input.customer", "2")
    keyed = [await submit(db, settings, "cust-a") for _ in range(10)]
    other = [await submit(db, settings, "cust-b") for _ in range(3)]
    statements = leases.RunStatements(db)

    async def claim(i: int) -> leases.ClaimBatch:
        return await statements.claim_many(keyed + other, f"w{i}", 30.0)

    batches = await asyncio.gather(*(claim(i) for i in range(6)))
    claimed = [r for b in batches for r in b.claimed]
    assert len([r for r in claimed if r in keyed]) == 2
    assert len([r for r in claimed if r in other]) == 2
    assert await executing(db) == 2
    refused = set().union(*(b.paused for b in batches))
    assert set(keyed) - set(claimed) <= refused  # answered held back: the message is acked
    # the polling path respects the limit too
    polled = await db.in_platform_writes(lambda c: leases.poll(c, "poller", 30.0, 20, 0.0))
    assert polled == []  # both keys are at their limit of 2

    waiting = next(r for r in keyed if r not in claimed)
    facts = await db.in_platform(lambda c: run_facts(c, [waiting]))
    said = decide(facts[waiting], ShardFacts(shard=0, known=False))
    assert said is not None and said.reason is Reason.OVER_CONCURRENCY_LIMIT
    assert f"{KEY} is at its limit: 2 of 2 executing" in said.summary
    # its deliveries say nothing about it: a dead-lettered message does not fail it
    kept = await db.in_platform_writes(
        lambda c: leases.fail_undeliverable(c, waiting, "w9", "undeliverable", "E-RUN-005")
    )
    assert kept is None

    # A holder dies: its slot comes back when its lease expires, not before.
    holder = next(r for r in claimed if r in keyed)
    await db.in_platform_writes(
        lambda c: c.execute(
            "UPDATE awooop_run_state SET lease_until = now() - interval '1 second'"
            " WHERE run_id = $1",
            holder,
        )
    )
    assert await executing(db) == 1
    again = await db.in_platform_writes(lambda c: leases.poll(c, "poller", 30.0, 20, 0.0))
    assert len([s for s in again if s.run_id in keyed]) == 1
    assert await executing(db) == 2
    none = await db.in_platform_writes(lambda c: leases.poll(c, "poller", 30.0, 20, 0.0))
    assert [s.run_id for s in none if s.run_id in keyed] == []


@pytest.mark.connections(9)
async def test_a_global_maximum_bounds_every_key_of_the_scope(
    db: Database, settings: Settings
) -> None:
    await limit(db, "input.customer", "5", global_max=3)
    runs = [await submit(db, settings, f"cust-{i % 4}") for i in range(12)]
    statements = leases.RunStatements(db)
    batches = await asyncio.gather(*(statements.claim_many(runs, f"w{i}", 30.0) for i in range(4)))
    assert sum(len(b.claimed) for b in batches) == 3
    polled = await db.in_platform_writes(lambda c: leases.poll(c, "poller", 30.0, 20, 0.0))
    assert polled == []
    claimed = {r for b in batches for r in b.claimed}
    waiting = next(r for r in runs if r not in claimed)
    facts = await db.in_platform(lambda c: run_facts(c, [waiting]))
    said = decide(facts[waiting], ShardFacts(shard=0, known=False))
    assert said is not None and said.reason is Reason.OVER_CONCURRENCY_LIMIT, said
    assert "the global maximum of channel:api is reached: 3 of 3 executing" in said.summary


# The statements of awooop_concurrency_admit (migration 0132), as its body writes them.
ADMIT_KEY_COUNT = """
SELECT count(*) FROM awooop_run_state AS r
WHERE r.project_id = $1 AND r.concurrency_key = $2
  AND r.status IN ('RUNNING', 'WAITING_TOOL') AND r.lease_until > now()
"""


def indexes(plan: object) -> set[str]:
    found: set[str] = set()
    nodes = [plan]
    while nodes:
        node = nodes.pop()
        if isinstance(node, list):
            nodes.extend(node)
        elif isinstance(node, dict):
            if isinstance(node.get("Index Name"), str):
                found.add(node["Index Name"])
            if node.get("Node Type") == "Seq Scan":
                found.add("seq:" + str(node.get("Relation Name")))
            nodes.extend(node.values())
    return found


async def test_admission_and_the_depth_cap_read_the_keyed_runs_index_in_a_backlog(
    db: Database, settings: Settings
) -> None:
    await create_runs(db, P, 3000)  # unkeyed runs: a table where a scan would be costly
    await limit(db, "input.customer", "2")
    events = [
        producer.ChannelEvent("api", f"k{i}", {"customer": f"c-{i % 50}"}) for i in range(500)
    ]
    await producer.submit_many(db, P, events, settings=settings)

    async def plans(conn: Any) -> list[object]:
        await conn.execute("ANALYZE awooop_run_state")
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        found = []
        for name, sql, args in (
            ("admit", ADMIT_KEY_COUNT, "('p', 'k')"),
            ("queued", depth.QUEUED_PER_KEY, "('p', ARRAY['k'])"),
            ("usage", concurrency.USAGE, "('p', 20)"),
            ("scopes", concurrency.SCOPE_USAGE, "('p')"),
        ):
            await conn.execute(f"PREPARE {name} AS {sql}")
            plan = await conn.fetchval(f"EXPLAIN (FORMAT JSON) EXECUTE {name}{args}")
            found.append(json.loads(plan) if isinstance(plan, str) else plan)
        return found

    admit, queued, usage, scopes = await db.in_platform_writes(plans)
    assert indexes(admit) == {"awooop_run_state_concurrency_idx"}, admit
    # the depth cap's count, the gauge's sample and the flow page's totals per scope: through
    # an index of the project's or the keyed runs (the planner picks by its estimates), never
    # a scan of the table
    for plan in (queued, usage, scopes):
        assert indexes(plan) and not any(i.startswith("seq:") for i in indexes(plan)), plan
