"""Dead-letter inspection and re-drive on real Redis and Postgres (R-16, issue 10)."""

from __future__ import annotations

import asyncio
import getpass
import uuid

import msgspec
import pytest
from prometheus_client import REGISTRY

from awooop.cli import build_parser
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import DeliveryLimitError, InvalidInputError
from awooop.core.events import run_stream_id
from awooop.log import eventlog
from awooop.loops.runs import reap_once
from awooop.runs import control, deadletters, leases
from awooop.runs.deadletters import Outcome
from awooop.services import Services
from streams.deadletter import DeadLetter, dead_letter_raw
from streams.envelope import FIELD, decode_envelope, encode
from streams.keys import WORKER_GROUP
from streams.publish import envelope_of
from streams.relay import Relay
from tests.support.runs import create_runs, load

P = "proj-dead"


@pytest.fixture(autouse=True)
async def live_shards(services: Services) -> None:
    """Every shard as the relay leaves a live one: the groups, then the epoch."""
    redis, keys = services.redis, services.keys
    for shard in keys.shards():
        await redis.xgroup_create(keys.work_stream(shard), WORKER_GROUP, id="0", mkstream=True)
        await redis.xgroup_create(keys.events_stream(shard), "projector:x", id="0", mkstream=True)
        await redis.set(keys.epoch(shard), "e1")


async def dead_lettered(services: Services, *, fail: bool = True) -> tuple[uuid.UUID, str]:
    """A run whose work message went to the dead-letter stream as the worker does it: the run
    failed (E-RUN-005) and the message moved. Returns the run and the entry's id."""
    db, redis, keys = services.db, services.redis, services.keys
    [run_id] = await create_runs(db, P)
    async with db.tenant(P) as conn:
        [created] = await eventlog.read_stream(conn, run_stream_id(run_id))
    shard = keys.shard_of(P)
    work = keys.work_stream(shard)
    await redis.xadd(work, {FIELD: encode(envelope_of(created))})
    [[_, [(entry_id, _)]]] = await redis.xreadgroup(WORKER_GROUP, "w1", {work: ">"}, count=1)
    if fail:
        await db.in_tenant(P, lambda c: leases.claim(c, run_id, "w1", 0.01))
        await asyncio.sleep(0.05)  # the 0.01 s lease runs out
        failed = await db.in_tenant(
            P,
            lambda c: leases.fail_undeliverable(
                c, run_id, "w2", "too often", DeliveryLimitError.code
            ),
        )
        assert failed is not None and failed.status == "FAILED"
    await dead_letter_raw(
        redis,
        keys,
        stream=work,
        group=WORKER_GROUP,
        entry_id=entry_id.decode(),
        data=encode(envelope_of(created)),
        reason="delivered 10 times",
        delivery_count=10,
    )
    [entry] = await deadletters.list_entries(services, shard)
    return run_id, entry.id


async def work_messages(services: Services) -> list[tuple[str, int]]:
    shard = services.keys.shard_of(P)
    rows = await services.redis.xrange(services.keys.work_stream(shard))
    return [(e.stream_id, e.attempt) for e in (decode_envelope(f[FIELD]) for _, f in rows)]


async def dead_count(services: Services) -> int:
    return sum(
        [
            await services.redis.xlen(services.keys.dead_letter_stream(s))
            for s in services.keys.shards()
        ]
    )


async def run_events(db: Database, run_id: uuid.UUID) -> list[eventlog.RecordedEvent]:
    async with db.tenant(P) as conn:
        return await eventlog.read_stream(conn, run_stream_id(run_id))


async def test_list_shows_each_entry_with_its_run_and_reason(
    settings: Settings, services: Services, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id, dead_id = await dead_lettered(services)
    args = build_parser().parse_args(["deadletters", "list", "--json"])
    assert await args.run(settings, args) == 0
    [shown] = msgspec.json.decode(capsys.readouterr().out)
    assert (shown["id"], shown["run_id"], shown["project_id"], shown["event_type"]) == (
        dead_id,
        str(run_id),
        P,
        "RunCreated",
    )
    assert (shown["group"], shown["delivery_count"], shown["reason"]) == (
        WORKER_GROUP,
        10,
        "delivered 10 times",
    )
    args = build_parser().parse_args(["deadletters", "list"])
    assert await args.run(settings, args) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split()[:4] == ["ID", "RUN", "PROJECT", "EVENT"] and dead_id in row


async def test_redrive_retries_the_failed_run_then_republishes_and_removes(
    settings: Settings, services: Services, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id, dead_id = await dead_lettered(services)
    args = build_parser().parse_args(["deadletters", "redrive", dead_id, "--json"])
    assert await args.run(settings, args) == 0
    [result] = msgspec.json.decode(capsys.readouterr().out)
    assert (result["outcome"], result["run_id"]) == ("retried", str(run_id))
    state = await load(services.db, P, run_id)
    assert (state.status, state.max_attempts) == ("PENDING", state.attempt_count + 3)
    retried = (await run_events(services.db, run_id))[-1]
    assert retried.event_type == "RunRetried"
    assert retried.metadata["actor"] == f"cli:{getpass.getuser()}"
    assert retried.metadata["redrive"] == dead_id
    assert await work_messages(services) == [(run_stream_id(run_id), 0), (run_stream_id(run_id), 1)]
    assert await dead_count(services) == 0


async def test_a_redrive_that_crashes_after_postgres_keeps_the_entry(
    services: Services,
) -> None:
    run_id, dead_id = await dead_lettered(services)
    [entry] = await deadletters.find(services, [dead_id])
    assert isinstance(entry, DeadLetter)

    async def crash(point: str) -> None:
        raise RuntimeError(f"killed at {point}")

    with pytest.raises(RuntimeError):
        await deadletters.redrive(services, entry, actor="ops", fault=crash)
    assert (await load(services.db, P, run_id)).status == "PENDING"  # Postgres committed
    assert await dead_count(services) == 1  # ... and the entry is still there
    assert len(await work_messages(services)) == 1

    again = await deadletters.redrive(services, entry, actor="ops")
    assert again.outcome is Outcome.REQUEUED  # the run is PENDING now: no second retry
    assert [e.event_type for e in await run_events(services.db, run_id)].count("RunRetried") == 1
    assert await dead_count(services) == 0
    assert len(await work_messages(services)) == 2
    gone = await deadletters.redrive(services, entry, actor="ops")
    assert (gone.outcome, gone.detail) == (Outcome.REQUEUED, "already re-driven by someone else")
    assert len(await work_messages(services)) == 2


async def test_finished_runs_are_discarded_and_problems_left_in_place(
    settings: Settings, services: Services, capsys: pytest.CaptureFixture[str]
) -> None:
    cancelled, cancelled_id = await dead_lettered(services, fail=False)
    await services.db.in_tenant(P, lambda c: control.cancel(c, cancelled, actor="ops"))
    shard = services.keys.shard_of(P)
    await services.redis.xadd(
        services.keys.dead_letter_stream(shard),
        {
            FIELD: b"\xc1junk",
            "reason": "undecodable",
            "stream": services.keys.work_stream(shard),
            "group": WORKER_GROUP,
            "entry_id": "1-0",
            "delivery_count": "1",
        },
    )
    args = build_parser().parse_args(["deadletters", "redrive", "--all", "--json"])
    assert await args.run(settings, args) == 1  # one entry was left
    results = {r["id"]: r for r in msgspec.json.decode(capsys.readouterr().out)}
    assert results[cancelled_id]["outcome"] == "discarded"
    [junk] = [r for i, r in results.items() if i != cancelled_id]
    assert (junk["outcome"], junk["detail"]) == ("left", "undecodable message: nothing to re-drive")
    assert await dead_count(services) == 1
    assert (await load(services.db, P, cancelled)).status == "CANCELLED"

    missing = build_parser().parse_args(["deadletters", "redrive", "0:1-1", "--json"])
    assert await missing.run(settings, missing) == 1
    assert msgspec.json.decode(capsys.readouterr().out)[0]["detail"] == "no such dead letter"


async def test_a_lost_shard_leaves_the_entry(services: Services) -> None:
    run_id, dead_id = await dead_lettered(services)
    await services.redis.delete(services.keys.epoch(services.keys.shard_of(P)))
    [entry] = await deadletters.find(services, [dead_id])
    assert isinstance(entry, DeadLetter)
    result = await deadletters.redrive(services, entry, actor="ops")
    assert result.outcome is Outcome.LEFT and "epoch" in result.detail
    assert await dead_count(services) == 1 and len(await work_messages(services)) == 1
    assert (await load(services.db, P, run_id)).status == "PENDING"  # the relay republishes it


async def test_events_stream_entries_go_back_to_the_events_stream(services: Services) -> None:
    [run_id] = await create_runs(services.db, P)
    [created] = await run_events(services.db, run_id)
    shard = services.keys.shard_of(P)
    events = services.keys.events_stream(shard)
    await dead_letter_raw(
        services.redis,
        services.keys,
        stream=events,
        group="projector:x",
        entry_id="1-0",
        data=encode(envelope_of(created)),
        reason="projector gave up",
        delivery_count=10,
    )
    [entry] = await deadletters.list_entries(services, shard)
    result = await deadletters.redrive(services, entry, actor="ops")
    assert result.outcome is Outcome.REPUBLISHED
    assert await services.redis.xlen(events) == 1 and await dead_count(services) == 0
    assert (await load(services.db, P, run_id)).status == "PENDING"


async def test_a_run_whose_leases_all_expired_is_dead_lettered_by_the_relay_from_the_log(
    settings: Settings, services: Services, capsys: pytest.CaptureFixture[str]
) -> None:
    """R-19: the reaper fails a run whose every attempt ended with an expired lease, naming the
    worker; the relay writes the dead letter when it publishes that failure (from the log: no
    consumer ever read a work message here), `runs show` tells each expiry, and a re-drive
    puts the run back to work."""
    db, redis, keys = services.db, services.redis, services.keys
    [run_id] = await create_runs(db, P, max_attempts=2)
    for worker in ("w1", "w2"):
        assert await db.in_tenant(P, lambda c, w=worker: leases.claim(c, run_id, w, 0.01))
        await asyncio.sleep(0.05)  # the 0.01 s lease runs out
        await reap_once(db)
    failed = await load(db, P, run_id)
    assert (failed.status, failed.failure_code) == ("FAILED", "E-RUN-004")
    assert (
        failed.failure_reason is not None and "worker w2 neither renewed" in failed.failure_reason
    )
    before = REGISTRY.get_sample_value("awooop_dead_letters_total") or 0.0
    relay = Relay(settings=settings, redis=redis, keys=keys)
    try:
        assert await relay.drain() == 5  # created, claimed, requeued, claimed, failed
    finally:
        await relay.close()
    shard = keys.shard_of(P)
    [entry] = await deadletters.list_entries(services, shard)
    env = entry.envelope()
    assert env is not None and (env.stream_id, env.event_type) == (
        run_stream_id(run_id),
        "RunFailed",
    )
    assert (entry.reason, entry.stream, entry.group) == (
        failed.failure_reason,
        keys.work_stream(shard),
        WORKER_GROUP,
    )
    assert (entry.source_entry_id, entry.delivery_count) == ("", 0)
    assert (REGISTRY.get_sample_value("awooop_dead_letters_total") or 0.0) == before + 1

    show = build_parser().parse_args(["runs", "show", P, str(run_id), "--json"])
    assert await show.run(settings, show) == 0
    shown = msgspec.json.decode(capsys.readouterr().out)
    assert shown["state"]["failure_reason"] == failed.failure_reason
    expiries = [
        (line["event_type"], line["attempt"], line["worker_id"])
        for line in shown["timeline"]
        if line["event_type"] in ("RunRequeued", "RunFailed")
    ]
    assert expiries == [("RunRequeued", 1, "w1"), ("RunFailed", 2, "w2")]
    requeued = next(ln for ln in shown["timeline"] if ln["event_type"] == "RunRequeued")
    assert "the lease of attempt 1 expired: worker w1" in requeued["detail"]["reason"]
    assert requeued["detail"]["last_renewal_at"]

    result = await deadletters.redrive(services, entry, actor="ops")
    assert result.outcome is Outcome.RETRIED
    assert (await load(db, P, run_id)).status == "PENDING"
    assert await dead_count(services) == 0
    republished = [e for e in await work_messages(services) if e == (run_stream_id(run_id), 1)]
    assert republished == [(run_stream_id(run_id), 1)]
    relay = Relay(settings=settings, redis=redis, keys=keys)
    try:
        assert await relay.drain() == 1  # RunRetried; the failure is not published again
    finally:
        await relay.close()
    assert await dead_count(services) == 0


@pytest.mark.parametrize(
    "argv",
    [
        ["deadletters", "redrive"],
        ["deadletters", "redrive", "1:2-0", "--all"],
        ["deadletters", "redrive", "nonsense"],
        ["deadletters", "redrive", "99:1-0"],
        ["deadletters", "redrive", "1:2-0", "--shard", "1"],
        ["deadletters", "list", "--shard", "99"],
    ],
)
async def test_bad_arguments_are_refused_before_anything_changes(
    settings: Settings, argv: list[str]
) -> None:
    args = build_parser().parse_args(argv)
    with pytest.raises(InvalidInputError):
        await args.run(settings, args)
