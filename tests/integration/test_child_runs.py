"""Child runs on real Postgres, in-process workers (docs/workers.md, Child runs): the fan-in with
a worker of one slot, outcomes of failed and cancelled children, the first N, the timeout,
cancelling the parent, the bound on unfinished children, a key taken by another run, the
parent's blocked_on, and the replay tool."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from prometheus_client import REGISTRY

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.events import RunCreated, run_stream_id
from awooop.eventlog.child_state import decoded, dedupe_key
from awooop.ingest import credentials
from awooop.loops.timers import cancel_children_once
from awooop.projections.registry import get
from awooop.projections.replay import replay
from awooop.runs import blocked_facts, concurrency, control, signals, timers
from awooop.runs.pause_rules import Scope
from awooop.services import Services
from awooop.testing import HandlerKit
from awooop.testing.postgres import PostgresKit
from awooop.worker.assembly import build_worker
from awooop.worker.runtime import Worker
from tests.integration.test_console import log_in
from tests.support import durable_handlers, handlers
from tests.support.http import app_client
from tests.support.runs import count_events, create_runs, event_types, load
from tests.support.waiting import eventually
from tests.support.workers import cli

pytest_plugins = ["awooop.testing.pytest_plugin"]

P = "proj-kids"


@pytest.fixture(autouse=True)
def clean_effects() -> Iterator[None]:
    handlers.EFFECTS.clear()
    yield
    handlers.EFFECTS.clear()


def worker(db: Database, settings: Settings, concurrency: int = 1) -> Worker:
    return build_worker(
        db=db, settings=settings, handler=durable_handlers.family, concurrency=concurrency
    ).worker


async def children_of(db: Database, parent: uuid.UUID) -> list[Any]:
    async with db.platform() as conn:
        return list(
            await conn.fetch(
                "SELECT run_id, project_id, status, provider_event_id, cancel_with_parent, "
                "channel_type, contract_id FROM awooop_run_state WHERE parent_run_id = $1 "
                "ORDER BY provider_event_id",
                parent,
            )
        )


async def parent_with(db: Database, **options: Any) -> uuid.UUID:
    [run_id] = await create_runs(db, P, payload=options)
    return run_id


async def test_a_worker_of_one_slot_runs_a_parent_and_its_children(
    db: Database, fast: Settings
) -> None:
    """The parent waits without its slot, so the one slot runs the children; a failed child
    counts with its outcome; the parent resumes once, with every outcome in the handles'
    order."""
    parent = await parent_with(db, children=5, per_child={"3": {"fail": True}})
    started = REGISTRY.get_sample_value("awooop_child_runs_started_total") or 0.0
    w = worker(db, fast)
    await w.run_until_idle()
    state = await load(db, P, parent)
    assert state.status == "COMPLETED", state
    results = state.result["results"]
    assert [r["key"] for r in results] == ["c0", "c1", "c2", "c3", "c4"]
    assert [r["status"] for r in results] == ["COMPLETED"] * 3 + ["FAILED", "COMPLETED"]
    assert results[4]["result"] == {"i": 4, "twice": 8}
    assert results[3]["failure_code"] == "E-HANDLER-001" and results[3]["result"] is None
    kids = await children_of(db, parent)
    assert len(kids) == 5
    assert {k["project_id"] for k in kids} == {P} and all(k["cancel_with_parent"] for k in kids)
    assert [k["provider_event_id"] for k in kids] == [dedupe_key(parent, f"c{i}") for i in range(5)]
    assert {k["channel_type"] for k in kids} == {"api"} and {k["contract_id"] for k in kids} == {
        "child"
    }
    assert [r["run_id"] for r in results] == [str(k["run_id"]) for k in kids]
    types = await event_types(db, P, parent)
    assert types.count("ChildrenFinished") == 1 and types.count("WaitStarted") == 1
    assert Counter(e["what"] for e in handlers.EFFECTS)["parent:after"] == 1
    async with db.platform() as conn:
        assert await conn.fetchval("SELECT count(*) FROM awooop_run_waits") == 0
    # Five starts, counted once: the resumed attempt found them in the journal.
    assert REGISTRY.get_sample_value("awooop_child_runs_started_total") == started + 5


async def test_children_finished_before_the_wait_are_seen_when_it_starts(
    db: Database, fast: Settings
) -> None:
    """One slot: the parent's first wait must start (its children cannot run before); once it
    resumed, a second wait for the same children finds them finished and goes on at once
    (a plain journal entry, no second WaitStarted), with the same outcomes."""
    parent = await parent_with(db, children=2, wait_again=True)
    await worker(db, fast).run_until_idle()
    state = await load(db, P, parent)
    assert state.status == "COMPLETED" and len(state.result["results"]) == 2
    assert state.result["again"] == state.result["results"]
    types = await event_types(db, P, parent)
    assert types.count("WaitStarted") == 1 and types.count("ChildrenFinished") == 1
    assert "kind" in state.saga_steps["children:1"]
    assert "kind" not in state.saga_steps["children:2"]
    assert state.saga_steps["children:2"]["result"] == state.result["results"]


@pytest.mark.connections(12)
async def test_the_first_n_and_a_timeout(db: Database, fast: Settings) -> None:
    """count=2 of 3, the third child waiting for an event: the parent resumes with two
    finished and the third as it was then; a wait for all three with a timeout raises
    E-CHILD-001."""
    waiting = {"2": {"wait_event": "go"}}
    first_two = await parent_with(db, children=3, count=2, per_child=waiting)
    all_three = await parent_with(db, children=3, per_child=waiting, timeout_s=0.5)
    await worker(db, fast, concurrency=4).run_until_idle()
    state = await load(db, P, first_two)
    assert state.status == "COMPLETED"
    [first, second, third] = decoded(state.result["results"])
    assert first.status == second.status == "COMPLETED"
    assert not third.finished  # as it was when the second finished (PENDING, or waiting)
    assert (await load(db, P, all_three)).status == "WAITING_EVENT"
    await asyncio.sleep(0.6)
    fired = await db.in_platform_writes(lambda c: timers.fire_due(c, 10))
    assert [s.run_id for s, _ in fired] == [all_three]
    await worker(db, fast).run_until_idle()
    state = await load(db, P, all_three)
    assert state.status == "COMPLETED" and state.result == {"timeout": "E-CHILD-001"}
    assert (await event_types(db, P, all_three)).count("ChildrenFinished") == 0


async def test_a_cancelled_child_counts_with_its_outcome(db: Database, fast: Settings) -> None:
    parent = await parent_with(db, children=2, per_child={"1": {"wait_event": "go"}})
    await worker(db, fast, concurrency=2).run_until_idle()
    assert (await load(db, P, parent)).status == "WAITING_EVENT"
    [_, waiting_child] = [k["run_id"] for k in await children_of(db, parent)]
    await db.in_tenant(P, lambda c: control.cancel(c, waiting_child, actor="ops", reason="no"))
    assert (await load(db, P, parent)).status == "RESUMED"  # in the cancel's transaction
    await worker(db, fast).run_until_idle()
    [done, cancelled] = (await load(db, P, parent)).result["results"]
    assert done["status"] == "COMPLETED" and cancelled["status"] == "CANCELLED"
    assert cancelled["failure_reason"] == "no"


@pytest.mark.connections(9)
async def test_cancelling_the_parent_cancels_its_unfinished_children(
    db: Database, fast: Settings
) -> None:
    """Children waiting for an event: cancelling the parent cancels them in its transaction,
    except a child whose row another transaction holds, which the timers loop's pass cancels
    once it is free; a child started with cancel_with_parent=False is left alone."""
    parent = await parent_with(db, children=3, child={"wait_event": "go"})
    kept = await parent_with(db, children=1, child={"wait_event": "go"}, cancel_with_parent=False)
    await worker(db, fast, concurrency=4).run_until_idle()
    kids = [k["run_id"] for k in await children_of(db, parent)]
    async with db.platform_writes() as holder:  # a transaction holding the third child's row
        await holder.execute("SELECT 1 FROM awooop_run_state WHERE run_id = $1 FOR UPDATE", kids[2])
        await db.in_tenant(P, lambda c: control.cancel(c, parent, actor="ops", reason="stop"))
        await db.in_tenant(P, lambda c: control.cancel(c, kept, actor="ops", reason="stop"))
        statuses = [(await load(db, P, k)).status for k in kids]
        assert statuses == ["CANCELLED", "CANCELLED", "WAITING_EVENT"]
    async with db.platform() as conn:
        assert await conn.fetchval("SELECT parent_run_id FROM awooop_child_cancels") == parent
    assert await cancel_children_once(db, 10) == (1, False)  # the timers loop's pass
    for k in kids:
        state = await load(db, P, k)
        assert state.status == "CANCELLED"
        assert state.failure_reason == f"its parent run {parent} was cancelled"
    [other] = [k["run_id"] for k in await children_of(db, kept)]
    assert (await load(db, P, other)).status == "WAITING_EVENT"
    async with db.platform() as conn:
        assert await conn.fetchval("SELECT count(*) FROM awooop_child_cancels") == 0
        assert await conn.fetchval("SELECT count(*) FROM awooop_run_waits") == 1  # other's


async def test_the_bound_on_unfinished_children_refuses_with_a_code_and_writes_nothing(
    db: Database, fast: Settings
) -> None:
    settings = msgspec.structs.replace(fast, children_pending_max=3)
    parent = await parent_with(db, children=4, child={"wait_event": "go"})
    await worker(db, settings, concurrency=4).run_until_idle()
    state = await load(db, P, parent)
    assert state.result == {"refused": "E-CHILD-002", "started": 3}
    assert sorted(s for s in state.saga_steps if s.startswith("child:")) == [
        "child:c0",
        "child:c1",
        "child:c2",
    ]
    assert len(await children_of(db, parent)) == 3
    async with db.platform() as conn:
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM awooop_channel_event_dedupe WHERE provider_event_id = $1",
                dedupe_key(parent, "c3"),
            )
            == 0
        )


async def test_a_key_taken_by_a_run_that_is_no_child_is_refused(
    db: Database, fast: Settings
) -> None:
    """An API delivery whose idempotency key happens to be a child's dedupe key: the child is
    refused (E-CHILD-003) rather than answered with a run that is not a child."""
    parent = await parent_with(db, children=1)
    async with db.tenant(P) as conn:
        now = await conn.fetchval("SELECT now()")
        await conn.execute(
            "INSERT INTO awooop_channel_event_dedupe (project_id, channel_type, "
            "provider_event_id, window_start, run_id, created_at, expires_at) "
            "SELECT $1, 'api', $2, w, $3, now(), now() + interval '1 day' FROM "
            "(VALUES (awooop_dedupe_window(now())), "
            "(awooop_dedupe_window(now()) + interval '7 days')) AS x(w)",
            P,
            dedupe_key(parent, "c0"),
            parent,
        )
        del now
    await worker(db, fast).run_until_idle()
    state = await load(db, P, parent)
    assert state.status == "FAILED" and state.failure_code == "E-CHILD-003"
    assert await children_of(db, parent) == []


@pytest.mark.connections(12)
async def test_blocked_on_says_how_many_children_finished(
    db: Database, fast: Settings, services: Services
) -> None:
    parent = await parent_with(db, children=3, per_child={"2": {"wait_event": "go"}})
    await worker(db, fast, concurrency=4).run_until_idle()
    found = await db.in_tenant(
        P,
        lambda c: blocked_facts.blocked_on(c, services.redis, services.keys, [parent], 30.0),
    )
    blocked = found[parent]
    assert blocked is not None and blocked.reason == "waiting_for_children"
    assert "2 of 3 children finished" in blocked.summary
    kids = [k["run_id"] for k in await children_of(db, parent)]
    await db.in_tenant(
        P,
        lambda c: signals.send(
            c, kids[2], "go", {}, key="k", sent_by="t", payload_max_bytes=100, kept_max=10
        ),
    )

    async def parent_completed() -> bool:
        # The parent is resumed by its last child's end; a loaded machine may find the worker
        # idle before the parent is claimable again, so it is run until the parent ends.
        await worker(db, fast, concurrency=4).run_until_idle()
        return (await load(db, P, parent)).status == "COMPLETED"

    await eventually(parent_completed, timeout_s=60, what="the parent completed")


@pytest.mark.connections(14)
async def test_the_replay_tool_rebuilds_parents_and_children(
    db: Database, fast: Settings, database_url: str
) -> None:
    """A finished family and a waiting one: the run state folded from the log equals the live
    rows (parent_run_id and cancel_with_parent included)."""
    await parent_with(db, children=3, per_child={"1": {"fail": True}})
    waiting = await parent_with(db, children=2, per_child={"0": {"wait_event": "go"}})
    await worker(db, fast, concurrency=4).run_until_idle()
    assert (await load(db, P, waiting)).status == "WAITING_EVENT"
    report = await replay(database_url, get("run_state"))
    assert report.differences == 0, report.lines()
    fired = await count_events(db, "ChildrenFinished")
    assert fired[run_stream_id(waiting)] == 0


async def test_a_child_run_created_event_carries_its_parent(db: Database, fast: Settings) -> None:
    parent = await parent_with(db, children=1)
    await worker(db, fast).run_until_idle()
    [kid] = await children_of(db, parent)
    async with db.platform() as conn:
        data = await conn.fetchval(
            "SELECT data FROM awooop_events WHERE stream_id = $1 AND version = 1",
            run_stream_id(kid["run_id"]),
        )
    created = msgspec.convert(data, RunCreated, strict=False)
    assert created.parent_run_id == parent and created.cancel_with_parent


async def test_runs_show_the_console_and_another_projects_token(
    settings: Settings, db: Database, fast: Settings
) -> None:
    """`awooop runs show` and the console's run page name a child's parent and a parent's
    children with their states; a child is its parent's project's: another project's token
    neither reads it nor signals it."""
    parent = await parent_with(db, children=2, per_child={"1": {"wait_event": "go"}})
    await worker(db, fast, concurrency=2).run_until_idle()
    [done, waiting] = [k["run_id"] for k in await children_of(db, parent)]
    shown = cli(settings, "runs", "show", P, str(parent))
    assert shown.returncode == 0, shown.stderr
    assert "children: 2 (1 finished)" in shown.stdout
    assert str(done) in shown.stdout and str(waiting) in shown.stdout
    assert "waiting_for_children" in shown.stdout and "1 of 2 children finished" in shown.stdout
    as_json = json.loads(cli(settings, "runs", "show", P, str(waiting), "--json").stdout)
    assert as_json["family"]["parent_run_id"] == str(parent)
    assert as_json["state"]["parent_run_id"] == str(parent)
    _, manage = await credentials.create_management_token(db, P, "manage")
    _, foreign = await credentials.create_management_token(db, "proj-other", "manage")
    async with app_client(settings, db) as http:
        await log_in(http, manage)
        page = (await http.get(f"/ui/runs/{P}/{parent}")).text
        assert 'id="children"' in page and "1 of 2 finished" in page
        assert f'href="/ui/runs/{P}/{done}"' in page and "WAITING_EVENT" in page
        child_page = (await http.get(f"/ui/runs/{P}/{waiting}")).text
        assert f'href="/ui/runs/{P}/{parent}"' in child_page and 'id="parent-run"' in child_page
    async with app_client(settings, db, bearer=foreign) as http:
        read = await http.get(f"/v1/projects/{P}/runs/{waiting}")
        assert read.status_code == 403 and read.json()["code"] == "E-AUTH-002"
        own = await http.get(f"/v1/projects/proj-other/runs/{waiting}")
        assert own.status_code == 404 and own.json()["code"] == "E-RUN-003"
        signal = await http.post(
            f"/v1/projects/{P}/runs/{waiting}/signals/go", json={"payload": {}, "key": "k1"}
        )
        assert signal.status_code == 403
        signal = await http.post(
            f"/v1/projects/proj-other/runs/{waiting}/signals/go", json={"payload": {}, "key": "k1"}
        )
        assert signal.status_code == 404 and signal.json()["code"] == "E-RUN-003"
    assert (await load(db, P, waiting)).status == "WAITING_EVENT"
    async with app_client(settings, db, bearer=manage) as http:
        read = await http.get(f"/v1/projects/{P}/runs/{waiting}")
        assert read.status_code == 200 and read.json()["project_id"] == P


async def test_a_childs_first_attempt_links_to_the_parents_span(
    db: Database, fast: Settings, spans: Any
) -> None:
    """The child's RunCreated carries the trace context of the parent's ``start_child`` span
    (inside the parent's ``run`` span): the child's first ``run`` span links to it."""
    parent = await parent_with(db, children=1)
    await worker(db, fast).run_until_idle()
    finished = spans.get_finished_spans()
    [kid] = [k["run_id"] for k in await children_of(db, parent)]
    [start] = [s for s in finished if s.name == "start_child c0"]
    parent_runs = [
        s
        for s in finished
        if s.name == "run" and (s.attributes or {}).get("awooop.run_id") == str(parent)
    ]
    assert start.context.trace_id in {s.context.trace_id for s in parent_runs}
    [first] = [
        s
        for s in finished
        if s.name == "run"
        and (s.attributes or {}).get("awooop.run_id") == str(kid)
        and (s.attributes or {}).get("awooop.attempt") == 1
    ]
    linked = {(link.context.trace_id, link.context.span_id) for link in first.links}
    in_trace = first.context.trace_id == start.context.trace_id
    assert in_trace or (start.context.trace_id, start.context.span_id) in linked


async def test_children_get_the_concurrency_key_and_fair_tag_intake_gives(
    db: Database, fast: Settings
) -> None:
    """The child contract's concurrency limit keys each child by its input, as intake keys any
    run, and each child gets its start tag in the fair order."""
    await db.in_tenant(
        P,
        lambda c: concurrency.set_limit(
            c, P, Scope.CONTRACT, "child", key_expr="input.i", max_expr="1", global_max=None,
            depth_cap=None, actor="test",
        ),
    )  # fmt: skip
    parent = await parent_with(db, children=2)
    await worker(db, fast).run_until_idle()
    assert (await load(db, P, parent)).status == "COMPLETED"
    async with db.platform() as conn:
        rows = await conn.fetch(
            "SELECT concurrency_key, concurrency_max, fair_tag FROM awooop_run_state "
            "WHERE parent_run_id = $1 ORDER BY provider_event_id",
            parent,
        )
    assert [(r["concurrency_key"], r["concurrency_max"]) for r in rows] == [
        ("contract:child/0", 1),
        ("contract:child/1", 1),
    ]
    assert all(r["fair_tag"] is not None for r in rows)


async def test_a_family_on_the_awooop_postgres_fixture_and_its_replay_in_the_kit(
    awooop_postgres: PostgresKit,
) -> None:
    """The testing fixture's worker runs a parent and its children; the parent's journal
    (handles and outcomes) replays in the in-memory kit without a database, running nothing."""
    pg = awooop_postgres
    parent = await pg.create({"children": 3, "per_child": {"1": {"fail": True}}})
    await pg.work(durable_handlers.family)
    state = await pg.state(parent)
    assert state.status == "COMPLETED"
    assert [r["status"] for r in state.result["results"]] == ["COMPLETED", "FAILED", "COMPLETED"]
    report = await HandlerKit(durable_handlers.family).replay(await pg.journal(parent))
    assert report.result.error is None and report.result.status == "COMPLETED"
    assert report.result.state.result == state.result
    assert report.ran == [] and "children:1" in report.replayed
