"""Loop heartbeats in Postgres and the project list of per-tenant loops (R-40, R-42)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from awooop.commands.loops import ago, listing, select
from awooop.core.db import Database
from awooop.core.errors import UnknownLoopError
from awooop.core.loop_heartbeats import (
    DatabaseHeartbeats,
    HeartbeatRow,
    project_source,
    read_heartbeats,
)
from awooop.core.loops import Heartbeat, LoopCategory, LoopContext, LoopSpec, run_loops
from tests.support import tenant_rows
from tests.support.waiting import eventually


def beat(ok: bool, failures: int = 0, error: str | None = None) -> Heartbeat:
    return Heartbeat("relay", "__platform__", "platform", 1.0, ok, failures, error)


async def test_heartbeats_record_success_failure_and_recovery(db: Database) -> None:
    sink = DatabaseHeartbeats(db, min_write_interval_s=0)
    await sink.record(beat(True))
    [row] = await read_heartbeats(db)
    assert row.last_success_at is not None and row.last_failure_at is None
    first_success = row.last_success_at
    await sink.record(beat(False, 1, "RuntimeError: boom"))
    [row] = await read_heartbeats(db)
    assert row.last_success_at == first_success  # a failure keeps the last success
    assert row.last_failure_at is not None and row.last_error == "RuntimeError: boom"
    assert row.consecutive_failures == 1
    await sink.record(beat(True))
    [row] = await read_heartbeats(db)
    assert row.last_success_at > first_success and row.consecutive_failures == 0
    assert row.last_error == "RuntimeError: boom"  # kept for the operator


def test_successes_are_throttled_failures_are_not() -> None:
    sink = DatabaseHeartbeats(db=None, min_write_interval_s=1.0)  # type: ignore[arg-type]
    assert sink.should_write(beat(True), now=100.0)
    sink._last[("relay", "__platform__")] = (100.0, True)
    assert not sink.should_write(beat(True), now=100.5)
    assert sink.should_write(beat(True), now=101.0)
    assert sink.should_write(beat(False, 1, "x"), now=100.1)
    sink._last[("relay", "__platform__")] = (100.0, False)
    assert sink.should_write(beat(True), now=100.1)  # recovery is written at once


async def test_projects_are_registered_by_their_first_event_and_can_be_disabled(
    db: Database,
) -> None:
    projects = project_source(db)
    assert await projects() == []
    for project in ("p2", "p1", "p1"):
        await tenant_rows.seed_project(db, project)
    async with db.tenant("__platform__") as conn:
        await tenant_rows._run(conn, "__platform__")
    assert await projects() == ["p1", "p2"]  # the platform pseudo-project never has instances
    async with db.platform_writes() as conn:
        await conn.execute("UPDATE awooop_projects SET disabled = true WHERE project_id = 'p2'")
    assert await projects() == ["p1"]


async def test_per_tenant_loops_run_for_registered_projects_and_write_heartbeats(
    db: Database,
) -> None:
    ran: set[str] = set()

    async def body(ctx: LoopContext) -> None:
        ran.add(ctx.project_id)

    for project in ("alpha", "beta"):
        await tenant_rows.seed_project(db, project)
    stop = asyncio.Event()
    sink = DatabaseHeartbeats(db, min_write_interval_s=0)
    from awooop.core import loops

    previous = loops.set_heartbeat_sink(sink)
    try:
        task = asyncio.create_task(
            run_loops(
                [LoopSpec("tenant_probe", LoopCategory.PER_TENANT, 0.02, body)],
                stop,
                projects=project_source(db),
                supervisor_interval_s=0.05,
            )
        )
        await eventually(
            lambda: ran, equals={"alpha", "beta"}, interval_s=0.02, what="the projects that ran"
        )
        stop.set()
        await asyncio.wait_for(task, 5)
    finally:
        loops.set_heartbeat_sink(previous)
    assert ran == {"alpha", "beta"}
    rows = {(r.loop_name, r.project_id) for r in await read_heartbeats(db)}
    assert {("tenant_probe", "alpha"), ("tenant_probe", "beta")} <= rows
    assert ("per_tenant_supervisor", "__platform__") in rows


def test_listing_expands_templates_and_shows_foreign_loops() -> None:
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

    async def body(_ctx: LoopContext) -> None:
        return None

    specs = [
        LoopSpec("reaper", LoopCategory.PLATFORM, 10, body),
        LoopSpec("poller", LoopCategory.PER_TENANT, 5, body),
    ]
    beats = [
        HeartbeatRow(
            "reaper",
            "__platform__",
            "platform",
            10,
            now - timedelta(seconds=75),
            None,
            None,
            0,
            "h",
            7,
            now,
            now,
        ),
        HeartbeatRow(
            "heartbeat",
            "__platform__",
            "platform",
            5,
            None,
            now,
            "OSError: x",
            4,
            "w",
            9,
            now,
            now,
        ),
    ]
    lines = listing(specs, ["a", "b"], beats, now)
    assert [(ln.loop, ln.project_id, ln.last_run) for ln in lines] == [
        ("reaper", "__platform__", "1m15s ago"),
        ("poller", "a", "never"),
        ("poller", "b", "never"),
        ("heartbeat", "__platform__", "never"),
    ]
    assert lines[-1].failures == 4 and lines[-1].last_error == "OSError: x"
    assert listing(specs[1:], [], [], now)[0].project_id == "(no project yet)"


def test_ago_and_select() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert ago(None, now) == "never"
    assert ago(now - timedelta(seconds=3), now) == "3s ago"
    assert ago(now - timedelta(hours=2, minutes=5), now) == "2h05m ago"

    async def body(_ctx: LoopContext) -> None:
        return None

    specs = [LoopSpec(n, LoopCategory.PLATFORM, 1, body) for n in ("a", "b")]
    assert select(specs, []) == specs
    assert [s.name for s in select(specs, ["b"])] == ["b"]
    with pytest.raises(UnknownLoopError, match="zzz") as refused:
        select(specs, ["b", "zzz"])
    assert refused.value.code == "E-LOOP-001"
    assert [s.name for s in select(specs, [], ["a"])] == ["b"]  # `loops run --skip relay`
    assert select(specs, ["a"], ["a"]) == []
    with pytest.raises(UnknownLoopError, match="rely"):
        select(specs, [], ["rely"])
