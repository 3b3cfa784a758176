"""The ``schedules`` loop on real Postgres (awooop/loops/schedules.py, awooop/schedules/fire.py),
under a simulated clock that three loop replicas share and race on: each fire time starts one
run through intake, whatever the replicas do at once; a 10-minute outage of every loop across
a daylight saving change is caught up as each policy promises; overlap policies; pauses; a
project's thousands of due schedules do not hold back another's; jitter."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import REGISTRY

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.events import run_stream_id
from awooop.eventlog.state import RunStatus
from awooop.loops import schedules as schedule_loop
from awooop.loops.registry import all_loops
from awooop.runs import control
from awooop.schedules import cron, rules, store
from awooop.services import Services
from tests.support import schedules as sim
from tests.support.logcapture import capture_context_logs
from tests.support.schedules import Clock

P, Q = "proj-sched", "proj-other"


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]  # year, month, day, ...


def minutes(first: datetime, count: int) -> list[str]:
    return [rules.key_time(first + timedelta(minutes=i)) for i in range(count)]


def started(reports: list[schedule_loop.Report]) -> int:
    return sum(r.started for r in reports)


@pytest.mark.parametrize(
    ("policy", "caught_up"),
    [
        ("latest", minutes(utc(2025, 3, 30, 1, 8), 1)),
        ("all", minutes(utc(2025, 3, 30, 0, 59), 10)),
        ("skip", []),
    ],
)
@pytest.mark.connections(10)
async def test_every_minute_across_dst_and_an_outage_of_every_loop(
    db: Database, settings: Settings, policy: str, caught_up: list[str]
) -> None:
    # Madrid springs forward at 01:00 UTC (02:00 CET -> 03:00 CEST) during the outage.
    clock = Clock(utc(2025, 3, 30, 0, 55, 30))
    made = await sim.create(db, settings, P, clock.now(), catch_up=policy, overlap="allow")
    assert made.next_fire_at == utc(2025, 3, 30, 0, 56)
    async with sim.replicas(settings, clock) as loops:
        for _ in range(3):  # 00:56, 00:57, 00:58, each seen 2 s late by three racing replicas
            clock.set(clock.now().replace(second=2) + timedelta(minutes=1))
            fired = await loops.race()
            assert [r.fired for r in fired].count(1) == 1 and started(fired) == 1
        clock.set(utc(2025, 3, 30, 1, 8, 30))  # every loop was down for ten minutes
        fired = await loops.race()
        assert started(fired) == len(caught_up)
        for _ in range(2):  # 01:09, 01:10: on time again
            clock.set(clock.now().replace(second=2) + timedelta(minutes=1))
            fired = await loops.race()
            assert started(fired) == 1
        assert sum(r.lost + r.duplicates for r in loops.reports) == 0
    expected = minutes(utc(2025, 3, 30, 0, 56), 3) + caught_up + minutes(utc(2025, 3, 30, 1, 9), 2)
    assert await sim.fired_times(db, P, made.schedule_id) == expected
    runs = await sim.runs(db, P)
    assert len(runs) == len(expected)  # one run per fire time, none twice
    assert {(r["channel_type"], r["contract_id"]) for r in runs} == {("api", "nightly")}
    assert all(r["input"] == {"report": "daily"} for r in runs)
    after = await sim.schedule(db, P, made.schedule_id)
    assert after.next_fire_at == utc(2025, 3, 30, 1, 11)
    assert after.fires == len(expected)
    assert after.skipped == 10 - len(caught_up)
    assert store.view(after)["next_fire_local"] == "2025-03-30T03:11:00+02:00"


@pytest.mark.parametrize(
    ("zone", "text", "day", "expected"),
    [
        # 02:30 does not exist on the spring-forward day; Madrid repeats 02:00-02:59 and New
        # York 01:00-01:59 on the fall-back day.
        ("Europe/Madrid", "30 2 * * *", (2025, 3, 30), ["2025-03-30T03:00:00+02:00"]),
        ("Europe/Madrid", "30 2 * * *", (2025, 10, 26), ["2025-10-26T02:30:00+02:00"]),
        (
            "America/New_York",
            "30 1,2 * * *",
            (2025, 3, 9),
            ["2025-03-09T01:30:00-05:00", "2025-03-09T03:00:00-04:00"],
        ),
        (
            "America/New_York",
            "30 1,2 * * *",
            (2025, 11, 2),
            ["2025-11-02T01:30:00-04:00", "2025-11-02T02:30:00-05:00"],
        ),
    ],
)
@pytest.mark.connections(10)
async def test_a_daily_wall_clock_time_fires_once_on_a_transition_day(
    db: Database,
    settings: Settings,
    zone: str,
    text: str,
    day: tuple[int, int, int],
    expected: list[str],
) -> None:
    clock = Clock(utc(*day) - timedelta(hours=12))
    made = await sim.create(db, settings, P, clock.now(), text, zone, overlap="allow")
    async with sim.replicas(settings, clock) as loops:
        for _ in range(48):  # every 30 minutes for a day, three replicas racing each time
            await loops.step(minutes=30)
        assert sum(r.duplicates + r.lost for r in loops.reports) == 0
    fired = await sim.fired_times(db, P, made.schedule_id)
    moments = [datetime.strptime(t, rules.KEY_TIME).replace(tzinfo=UTC) for t in fired]
    assert [cron.local_text(t, zone) for t in moments] == expected


@pytest.mark.connections(10)
async def test_overlap_skip_starts_nothing_while_the_previous_run_is_unfinished(
    db: Database, settings: Settings
) -> None:
    clock = Clock(utc(2025, 6, 1, 12, 0, 30))
    made = await sim.create(db, settings, P, clock.now(), overlap="skip")
    async with sim.replicas(settings, clock) as loops:
        await loops.step(minutes=1)  # 12:01: a run
        await loops.step(minutes=1)  # 12:02: the 12:01 run is still PENDING: skipped
        after = await sim.schedule(db, P, made.schedule_id)
        assert (after.last_outcome, after.fires, after.skipped) == ("skipped_overlap", 1, 1)
        first = after.last_run_id
        assert first is not None
        await db.in_tenant(P, lambda c: control.cancel(c, first, actor="test"))
        await loops.step(minutes=1)  # 12:03: the previous run finished: a run
    assert await sim.fired_times(db, P, made.schedule_id) == [
        "2025-06-01T12:01:00Z",
        "2025-06-01T12:03:00Z",
    ]


@pytest.mark.connections(10)
async def test_overlap_cancel_previous_cancels_it_through_the_cancel_path(
    db: Database, settings: Settings
) -> None:
    clock = Clock(utc(2025, 6, 1, 12, 0, 30))
    made = await sim.create(db, settings, P, clock.now(), overlap="cancel_previous")
    async with sim.replicas(settings, clock) as loops:
        await loops.step(minutes=1)
        await loops.step(minutes=1)
    runs = {r["provider_event_id"]: r for r in await sim.runs(db, P)}
    first = runs[rules.fire_key(made.schedule_id, utc(2025, 6, 1, 12, 1))]
    second = runs[rules.fire_key(made.schedule_id, utc(2025, 6, 1, 12, 2))]
    assert (first["status"], second["status"]) == ("CANCELLED", "PENDING")
    event = await db.in_platform(
        lambda c: c.fetchrow(
            "SELECT data, metadata FROM awooop_events WHERE stream_id = $1 "
            "AND event_type = 'RunCancelled'",
            run_stream_id(first["run_id"]),
        )
    )
    assert event["data"]["actor"] == f"schedule:{made.schedule_id}"
    assert "overlap cancel_previous" in event["data"]["reason"]


@pytest.mark.connections(10)
async def test_overlap_allow_starts_every_fire_time(db: Database, settings: Settings) -> None:
    clock = Clock(utc(2025, 6, 1, 12, 0, 30))
    made = await sim.create(db, settings, P, clock.now(), overlap="allow")
    async with sim.replicas(settings, clock) as loops:
        for _ in range(3):
            await loops.step(minutes=1)
    runs = await sim.runs(db, P)
    assert [r["status"] for r in runs] == [RunStatus.PENDING.value] * 3
    assert await sim.fired_times(db, P, made.schedule_id) == minutes(utc(2025, 6, 1, 12, 1), 3)


@pytest.mark.connections(10)
async def test_a_paused_schedule_fires_nothing_and_resumes_at_its_next_time(
    db: Database, settings: Settings
) -> None:
    clock = Clock(utc(2025, 6, 1, 12, 0, 30))
    made = await sim.create(db, settings, P, clock.now(), catch_up="all")
    await db.in_tenant(P, lambda c: store.pause(c, P, made.schedule_id, actor="test"))
    async with sim.replicas(settings, clock) as loops:
        for _ in range(5):
            await loops.step(minutes=1)
        assert await sim.runs(db, P) == []
        resumed = await db.in_tenant(
            P, lambda c: store.resume(c, P, made.schedule_id, actor="test", now=clock.now())
        )
        assert resumed.next_fire_at == utc(2025, 6, 1, 12, 6) and not resumed.paused
        await loops.step(minutes=1)  # 12:06:30: nothing of the paused time is caught up
    assert await sim.fired_times(db, P, made.schedule_id) == ["2025-06-01T12:06:00Z"]


@pytest.mark.connections(10)
async def test_all_is_capped_and_a_deleted_schedule_fires_nothing(
    db: Database, settings: Settings
) -> None:
    capped = msgspec.structs.replace(settings, schedule_catch_up_max=3)
    clock = Clock(utc(2025, 6, 1, 12, 0, 30))
    made = await sim.create(db, capped, P, clock.now(), catch_up="all", overlap="allow")
    gone = await sim.create(db, capped, P, clock.now())
    await db.in_tenant(P, lambda c: store.delete(c, P, gone.schedule_id, actor="test"))
    async with sim.replicas(capped, clock) as loops:
        await loops.step(minutes=10)  # 12:01 to 12:10 due: the most recent three start
    assert await sim.fired_times(db, P, made.schedule_id) == minutes(utc(2025, 6, 1, 12, 8), 3)
    assert await sim.fired_times(db, P, gone.schedule_id) == []


async def test_one_projects_many_due_schedules_do_not_hold_back_anothers(
    db: Database, settings: Settings
) -> None:
    clock = Clock(utc(2025, 6, 1, 12, 0, 30))
    many = [await sim.create(db, settings, P, clock.now()) for _ in range(150)]
    other = await sim.create(db, settings, Q, clock.now())
    clock.move(minutes=1)
    first = await schedule_loop.fire_due(db, settings, clock.now, batch=10, max_batches=1)
    assert first.fired == 10
    assert await sim.fired_times(db, Q, other.schedule_id) == ["2025-06-01T12:01:00Z"]
    rest = await schedule_loop.fire_due(db, settings, clock.now)
    assert rest.fired == 150 - 9
    assert len(await sim.runs(db, P)) == len(many)


@pytest.mark.connections(10)
async def test_jitter_delays_each_fire_the_same_on_every_replica(
    db: Database, settings: Settings
) -> None:
    clock = Clock(utc(2025, 6, 1, 12, 0, 30))
    made = await sim.create(db, settings, P, clock.now(), jitter="40s")
    fire_time = utc(2025, 6, 1, 12, 1)
    delay = rules.jitter_delay(made.schedule_id, fire_time, 40)
    assert made.due_at == fire_time + delay and delay > timedelta(0)
    async with sim.replicas(settings, clock) as loops:
        clock.set(fire_time + delay - timedelta(milliseconds=1))
        assert started(await loops.race()) == 0
        clock.set(fire_time + delay)
        assert started(await loops.race()) == 1
    after = await sim.schedule(db, P, made.schedule_id)
    nxt = utc(2025, 6, 1, 12, 2)
    assert after.due_at == nxt + rules.jitter_delay(made.schedule_id, nxt, 40)


async def test_the_loop_is_registered_and_reports_liveness(
    db: Database, settings: Settings
) -> None:
    services = Services(settings=settings, db=db, redis=None, keys=sim.keys(settings))
    [spec] = [s for s in all_loops(services) if s.name == schedule_loop.LOOP_NAME]
    assert (spec.category.value, spec.interval_s) == ("platform", settings.schedules_interval_s)
    clock = Clock(utc(2025, 6, 1, 12, 0, 30))
    async with sim.replicas(settings, clock) as loops:
        await loops.race()
    seen = REGISTRY.get_sample_value(
        "awooop_background_loop_last_run_timestamp",
        {"loop_name": "schedules", "project_id": "__platform__"},
    )
    assert seen is not None and seen > 0


@pytest.mark.connections(10)
async def test_three_replicas_fire_many_schedules_each_once(
    db: Database, settings: Settings
) -> None:
    clock = Clock(utc(2025, 6, 1, 12, 0, 30))
    made = [
        await sim.create(db, settings, p, clock.now(), overlap="allow")
        for p in (P, Q)
        for _ in range(30)
    ]
    async with sim.replicas(settings, clock) as loops:
        for _ in range(4):
            fired = await loops.step(minutes=1)
            assert sum(r.fired for r in fired) == len(made)
            assert sum(r.duplicates for r in fired) == 0
    for one in made:
        times = await sim.fired_times(db, one.project_id, one.schedule_id)
        assert times == minutes(utc(2025, 6, 1, 12, 1), 4)


async def test_each_fire_has_its_project_and_a_trace_its_run_carries(
    db: Database, settings: Settings, spans: InMemorySpanExporter
) -> None:
    clock = Clock(utc(2025, 6, 1, 12, 0, 30))
    mine = await sim.create(db, settings, P, clock.now())
    theirs = await sim.create(db, settings, Q, clock.now())
    clock.move(minutes=1)
    with capture_context_logs() as logs:
        assert (await schedule_loop.fire_due(db, settings, clock.now)).started == 2
    fires = {
        s.attributes["awooop.schedule_id"]: s
        for s in spans.get_finished_spans()
        if s.name == "schedule fire" and s.attributes
    }
    for made in (mine, theirs):
        span = fires[str(made.schedule_id)]
        assert span.parent is None and span.attributes["awooop.project_id"] == made.project_id
        trace_id = format(span.context.trace_id, "032x")
        [run] = [r for r in await sim.runs(db, made.project_id)]
        metadata = await db.in_platform(
            lambda c, run_id=run["run_id"]: c.fetchval(
                "SELECT metadata FROM awooop_events WHERE stream_id = $1 AND version = 1",
                run_stream_id(run_id),
            )
        )
        assert metadata["source"] == "schedule" and trace_id in metadata["traceparent"]
        assert metadata["schedule_id"] == str(made.schedule_id)
        assert metadata["fire_time"] == "2025-06-01T12:01:00Z"
        [line] = [
            e
            for e in logs
            if e["event"] == "schedule_fired" and e.get("project_id") == made.project_id
        ]
        assert line["trace_id"] == trace_id
