"""Fair share between projects on real Postgres: intake's start tags interleave a newcomer with
a backlog (by weight), an idle project restarts at the virtual time and a paused backlog does
not hold it back; a claim from a message defers a run another project's is ahead of (never
behind a paused or full-key run); the polling path takes runs in the fair order, and past a
head of paused runs longer than its window in arrival order."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

from awooop import producer
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.runs import concurrency, fairness, leases, pauses
from awooop.runs.leases import FAIR_WINDOW
from awooop.runs.pause_rules import Scope
from tests.support.runs import create_runs

A, B, C = "proj-a", "proj-b", "proj-c"
WORKER = "w-fair"


async def submit(db: Database, settings: Settings, project: str, count: int) -> list[uuid.UUID]:
    """``count`` runs of ``project`` in one batch (one intake statement), in their fair order
    (a batch's runs are tagged in the order intake writes them: by key)."""
    events = [producer.ChannelEvent("api", uuid.uuid4().hex, {"n": i}) for i in range(count)]
    done = await producer.submit_many(db, project, events, settings=settings)
    run_ids = [s.run_id for s in done]
    rows = await db.in_platform(
        lambda c: c.fetch(
            "SELECT run_id FROM awooop_run_state WHERE run_id = ANY($1::uuid[]) ORDER BY fair_tag",
            run_ids,
        )
    )
    return [r["run_id"] for r in rows]


async def waiting_order(db: Database, limit: int) -> list[str]:
    """The projects of the first ``limit`` waiting runs in the fair order."""
    rows = await db.in_platform(
        lambda c: c.fetch(
            "SELECT project_id FROM awooop_run_state WHERE status IN ('PENDING', 'RESUMED')"
            " ORDER BY fair_tag, created_at LIMIT $1",
            limit,
        )
    )
    return [r["project_id"] for r in rows]


async def tags(db: Database, run_ids: list[uuid.UUID]) -> list[float]:
    rows = await db.in_platform(
        lambda c: c.fetch(
            "SELECT run_id, fair_tag FROM awooop_run_state WHERE run_id = ANY($1::uuid[])",
            run_ids,
        )
    )
    by_id = {r["run_id"]: r["fair_tag"] for r in rows}
    return [by_id[r] for r in run_ids]


async def claim(db: Database, run_id: uuid.UUID, *, fair: bool = True) -> Any:
    return await db.in_platform_writes(
        lambda c: leases.claim_many(c, [run_id], WORKER, 30.0, fair=fair)
    )


async def poll(db: Database, limit: int, *, fair: bool = True) -> list[str]:
    states = await db.in_platform_writes(
        lambda c: leases.poll(c, WORKER, 30.0, limit, 0.0, fair=fair)
    )
    return [s.project_id for s in states]


async def pause(db: Database, project: str) -> None:
    await db.in_tenant(
        project, lambda c: pauses.pause(c, project, Scope.PROJECT, "", reason="t", actor="test")
    )


async def test_a_newcomer_is_interleaved_with_a_backlog(db: Database, settings: Settings) -> None:
    backlog = await submit(db, settings, A, 200)
    newcomer = await submit(db, settings, B, 10)
    assert await tags(db, backlog[:3]) == [0.0, 1.0, 2.0]
    assert await tags(db, newcomer[:3]) == [0.0, 1.0, 2.0]  # from the virtual time, not after A
    assert await waiting_order(db, 20) == [A, B] * 10
    later = await submit(db, settings, A, 1)
    assert await tags(db, later) == [200.0]  # after A's own last waiting run


async def test_a_weight_sets_the_share(db: Database, settings: Settings) -> None:
    await db.in_platform_writes(lambda c: fairness.set_share(c, B, 2, actor="test"))
    await submit(db, settings, A, 100)
    await submit(db, settings, B, 100)
    first = Counter(await waiting_order(db, 30))
    assert first == {B: 20, A: 10}


async def test_an_idle_project_restarts_at_the_virtual_time(
    db: Database, settings: Settings
) -> None:
    early = await submit(db, settings, C, 10)
    await submit(db, settings, A, 100)
    assert Counter(await poll(db, 70)) == {A: 60, C: 10}  # C's 10 and A's first 60, interleaved
    assert await tags(db, early) == [float(i) for i in range(10)]
    back = await submit(db, settings, C, 1)
    # C has nothing waiting: it starts at the head of the waiting runs (A's 61st, tag 60), and
    # neither jumps ahead with its old tags nor pays for the runs it had.
    assert await tags(db, back) == [60.0]


async def test_a_paused_backlog_does_not_hold_the_virtual_time_back(
    db: Database, settings: Settings
) -> None:
    await submit(db, settings, C, 10)
    await pause(db, C)
    await submit(db, settings, A, 100)
    await poll(db, 50)
    newcomer = await submit(db, settings, B, 1)
    head = await db.in_platform(
        lambda c: c.fetchval(
            "SELECT min(fair_tag) FROM awooop_run_state WHERE project_id = $1"
            " AND status = 'PENDING'",
            A,
        )
    )
    # Behind A's head, not at C's paused tags (which would put it ahead of A's waiting runs).
    assert (await tags(db, newcomer))[0] == head


async def test_a_claim_defers_a_run_another_project_is_ahead_of(
    db: Database, settings: Settings
) -> None:
    backlog = await submit(db, settings, A, 100)
    newcomer = await submit(db, settings, B, 10)
    far = await claim(db, backlog[50])
    assert far.claimed == {} and far.deferred == {backlog[50]} <= far.paused
    assert (await claim(db, newcomer[5])).deferred == {newcomer[5]}  # A's 0..4 come first
    assert set((await claim(db, backlog[0])).claimed) == {backlog[0]}
    assert set((await claim(db, newcomer[1])).claimed) == {newcomer[1]}  # one step: not deferred
    assert set((await claim(db, backlog[60], fair=False)).claimed) == {backlog[60]}


async def test_a_claim_is_not_deferred_behind_paused_or_full_key_runs(
    db: Database, settings: Settings
) -> None:
    await submit(db, settings, B, 10)
    backlog = await submit(db, settings, A, 100)
    await pause(db, B)
    assert set((await claim(db, backlog[50])).claimed) == {backlog[50]}

    await db.in_tenant(
        C,
        lambda c: concurrency.set_limit(
            c,
            C,
            Scope.CHANNEL,
            "api",
            key_expr="project",
            max_expr="1",
            global_max=None,
            depth_cap=None,
            actor="test",
        ),
    )
    keyed = await submit(db, settings, C, 10)  # tags from A's head: 0..9, one key, at most 1
    assert set((await claim(db, keyed[0], fair=False)).claimed) == {keyed[0]}  # the key is full
    assert set((await claim(db, backlog[70])).claimed) == {backlog[70]}


async def test_polling_takes_the_fair_order(db: Database, settings: Settings) -> None:
    await submit(db, settings, A, 100)
    await submit(db, settings, B, 10)
    assert Counter(await poll(db, 20)) == {A: 10, B: 10}
    assert Counter(await poll(db, 10, fair=False)) == {A: 10}  # arrival order: A's oldest


async def test_polling_gets_past_a_paused_head_longer_than_its_window(
    db: Database, settings: Settings
) -> None:
    await create_runs(db, C, FAIR_WINDOW + 36, payload={})
    await pause(db, C)
    await submit(db, settings, A, 5)
    assert await poll(db, 10) == [A] * 5
