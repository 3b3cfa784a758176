"""Dead letters in Postgres on real Redis and Postgres (R-16, R-19): recorded with the failure
that decides them, listed, re-driven and resolved from Postgres, surviving a Redis wipe."""

from __future__ import annotations

import asyncio
import getpass
import shutil
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import msgspec
import pytest
from prometheus_client import REGISTRY

from awooop.cli import build_parser
from awooop.core.config import Settings
from awooop.core.context import PLATFORM_PROJECT
from awooop.core.db import Database
from awooop.core.errors import DeliveryLimitError, InvalidInputError
from awooop.core.events import run_stream_id
from awooop.core.migrate import MIGRATIONS_DIR, migrate
from awooop.eventlog import deadletters as log_deadletters
from awooop.eventlog import eventlog
from awooop.eventlog.deadletters import DeadLetterRecord, DeadLetterRow
from awooop.eventlog.state import RunState, apply, state_values
from awooop.loops.runs import reap_once
from awooop.loops.stats import StatsLoops
from awooop.runs import blocked_facts, control, deadletters, leases
from awooop.runs.blocked import Reason
from awooop.runs.deadletters import Outcome
from awooop.services import Services
from awooop.streams.deadletter import dead_letter_undecodable
from awooop.streams.envelope import FIELD, decode_envelope
from awooop.streams.keys import WORKER_GROUP
from awooop.streams.relay import Relay
from tests.support import databases, factories, handlers
from tests.support.logcapture import capture_context_logs
from tests.support.runs import create_runs, load
from tests.support.waiting import eventually
from tests.support.workers import serving_worker, streaming_worker

P = "proj-dead"
DEAD_LETTERS_TABLE = "SELECT to_regclass('awooop_dead_letters')"
OTHER = "proj-other"


@pytest.fixture(autouse=True)
async def live_shards(services: Services) -> None:
    """Every shard as the relay leaves a live one: the groups, then the epoch."""
    redis, keys = services.redis, services.keys
    for shard in keys.shards():
        await redis.xgroup_create(keys.work_stream(shard), WORKER_GROUP, id="0", mkstream=True)
        await redis.xgroup_create(keys.events_stream(shard), "projector:x", id="0", mkstream=True)
        await redis.set(keys.epoch(shard), "e1")


async def dead_lettered(services: Services, project: str = P) -> uuid.UUID:
    """A run failed as the worker fails one whose message was delivered too often: its
    RunFailed and its dead letter in one transaction."""
    db = services.db
    [run_id] = await create_runs(db, project)
    await db.in_tenant(project, lambda c: leases.claim(c, run_id, "w1", 0.01))
    await asyncio.sleep(0.05)  # the 0.01 s lease runs out
    undelivered = leases.Undelivered(
        group=WORKER_GROUP, entry_id="1-0", delivery_count=10, event_type="RunCreated", message=b""
    )
    failed = await db.in_tenant(
        project,
        lambda c: leases.fail_undeliverable(
            c, run_id, "w2", "delivered 10 times", DeliveryLimitError.code, undelivered=undelivered
        ),
    )
    assert failed is not None and failed.status == "FAILED"
    return run_id


async def open_rows(db: Database, project: str = P) -> list[DeadLetterRow]:
    return await db.in_tenant(project, lambda c: log_deadletters.list_open(c, project))


async def all_rows(db: Database) -> list[dict[str, Any]]:
    async with db.platform() as conn:
        rows = await conn.fetch("SELECT * FROM awooop_dead_letters ORDER BY dead_lettered_at")
    return [dict(r) for r in rows]


async def work_messages(services: Services) -> list[tuple[str, int]]:
    shard = services.keys.shard_of(P)
    rows = await services.redis.xrange(services.keys.work_stream(shard))
    return [(e.stream_id, e.attempt) for e in (decode_envelope(f[FIELD]) for _, f in rows)]


async def lose_redis(services: Services) -> None:
    """Everything of this test's Redis prefix, as a restart without persistence loses it."""
    redis, prefix = services.redis, services.keys.prefix
    doomed = [k async for k in redis.scan_iter(match=f"{prefix}:*", count=1000)]
    await redis.delete(*doomed)


def json_out(capsys: pytest.CaptureFixture[str]) -> Any:
    return msgspec.json.decode(capsys.readouterr().out)


async def test_list_shows_each_dead_letter_with_its_run_and_reason(
    settings: Settings, services: Services, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = await dead_lettered(services)
    args = build_parser().parse_args(["deadletters", "list", "--json"])
    assert await args.run(settings, args) == 0
    [shown] = json_out(capsys)
    assert (shown["run_id"], shown["project_id"], shown["event_type"]) == (
        str(run_id),
        P,
        "RunCreated",
    )
    assert (shown["group"], shown["delivery_count"], shown["reason"], shown["code"]) == (
        WORKER_GROUP,
        10,
        "delivered 10 times",
        "E-RUN-005",
    )
    args = build_parser().parse_args(["deadletters", "list"])
    assert await args.run(settings, args) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split()[:4] == ["ID", "RUN", "PROJECT", "EVENT"] and shown["id"] in row
    only = build_parser().parse_args(["deadletters", "list", "--project", OTHER, "--json"])
    assert await only.run(settings, only) == 0
    assert json_out(capsys) == []


async def test_a_project_sees_only_its_own_dead_letters(services: Services) -> None:
    mine = await dead_lettered(services, P)
    theirs = await dead_lettered(services, OTHER)
    assert [r.run_id for r in await open_rows(services.db, P)] == [mine]
    assert [r.run_id for r in await open_rows(services.db, OTHER)] == [theirs]
    # Unfiltered, a tenant connection still sees its own project's only.
    seen = await services.db.in_tenant(P, lambda c: log_deadletters.list_open(c))
    assert [r.run_id for r in seen] == [mine]
    assert await services.db.in_tenant(P, lambda c: log_deadletters.open_of_runs(c, [theirs])) == []


async def test_redrive_retries_the_failed_run_and_resolves_the_dead_letter(
    settings: Settings, services: Services, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = await dead_lettered(services)
    [row] = await open_rows(services.db)
    dead_id = str(row.dead_letter_id)
    args = build_parser().parse_args(["deadletters", "redrive", dead_id, "--json"])
    assert await args.run(settings, args) == 0
    [result] = json_out(capsys)
    assert (result["outcome"], result["run_id"]) == ("retried", str(run_id))
    state = await load(services.db, P, run_id)
    assert (state.status, state.max_attempts) == ("PENDING", state.attempt_count + 3)
    async with services.db.tenant(P) as conn:
        retried = (await eventlog.read_stream(conn, run_stream_id(run_id)))[-1]
    assert retried.event_type == "RunRetried"
    assert retried.metadata["actor"] == f"cli:{getpass.getuser()}"
    assert retried.metadata["redrive"] == dead_id
    assert await open_rows(services.db) == []
    [closed] = await all_rows(services.db)
    assert (closed["resolution"], closed["resolved_by"]) == ("redriven", f"cli:{getpass.getuser()}")
    # A second re-drive of the same dead letter changes nothing.
    [entry] = await deadletters.find(services, [dead_id])
    assert isinstance(entry, DeadLetterRow)
    again = await deadletters.redrive(services, entry, actor="ops")
    assert (again.outcome, again.detail) == (Outcome.LEFT, "already resolved (redriven)")
    assert (await load(services.db, P, run_id)).max_attempts == state.max_attempts


async def test_a_retry_of_the_run_resolves_its_dead_letter(services: Services) -> None:
    """A dead letter never stays open once its run was retried by any path."""
    run_id = await dead_lettered(services)
    await services.db.in_tenant(
        P, lambda c: control.retry(c, run_id, actor="ops@example", extra_attempts=1)
    )
    assert await open_rows(services.db) == []
    [closed] = await all_rows(services.db)
    assert (closed["resolution"], closed["resolved_by"]) == ("retried", "ops@example")


async def test_a_bulk_retry_resolves_the_dead_letters_of_its_runs(
    settings: Settings, services: Services, capsys: pytest.CaptureFixture[str]
) -> None:
    """The batched write path (one statement for many runs' RunRetried) resolves them too."""
    lettered = {await dead_lettered(services) for _ in range(3)}
    assert {r.run_id for r in await open_rows(services.db)} == lettered
    argv = ["runs", "retry", "--filter", f"project={P}", "--filter", "status=FAILED"]
    args = build_parser().parse_args([*argv, "--actor", "Bob"])
    assert await args.run(settings, args) == 0
    capsys.readouterr()
    assert await open_rows(services.db) == []
    rows = await all_rows(services.db)
    assert {(r["run_id"], r["resolution"]) for r in rows} == {(r, "retried") for r in lettered}


async def test_a_dispatchable_run_gets_its_work_message_again(services: Services) -> None:
    """An open dead letter of a PENDING run (recorded by hand: the runtime fails what it
    dead-letters) is resolved and its dispatch event appended to the work stream; with the
    shard's epoch gone nothing is appended (the relay's rebuild republishes the run)."""
    [run_id, lost_id] = await create_runs(services.db, P, 2)
    for version, rid in enumerate((run_id, lost_id), start=1):
        record = DeadLetterRecord(
            project_id=P, run_id=rid, run_version=version, source="work", reason="by hand"
        )
        await services.db.in_tenant(P, lambda c, r=record: log_deadletters.record(c, r))
    entries = {r.run_id: r for r in await open_rows(services.db)}

    async def crash(point: str) -> None:
        raise RuntimeError(f"killed at {point}")

    with pytest.raises(RuntimeError):
        await deadletters.redrive(services, entries[run_id], actor="ops", fault=crash)
    assert await work_messages(services) == []  # the crash came after Postgres, before Redis
    # Resolved anyway: the run is PENDING in Postgres, where the workers' polling finds it.
    assert [r.run_id for r in await open_rows(services.db)] == [lost_id]

    await services.redis.delete(services.keys.epoch(services.keys.shard_of(P)))
    lost = await deadletters.redrive(services, entries[lost_id], actor="ops")
    assert lost.outcome is Outcome.REQUEUED and "relay republishes" in lost.detail
    assert await work_messages(services) == []
    await services.redis.set(services.keys.epoch(services.keys.shard_of(P)), "e1")
    record = DeadLetterRecord(
        project_id=P, run_id=run_id, run_version=9, source="work", reason="again"
    )
    await services.db.in_tenant(P, lambda c: log_deadletters.record(c, record))
    [entry] = await open_rows(services.db)
    done = await deadletters.redrive(services, entry, actor="ops")
    assert (done.outcome, done.detail) == (Outcome.REQUEUED, "")
    assert await work_messages(services) == [(run_stream_id(run_id), 0)]


async def test_finished_runs_are_discarded_and_problems_left_open(
    settings: Settings, services: Services, capsys: pytest.CaptureFixture[str]
) -> None:
    [cancelled] = await create_runs(services.db, P)
    record = DeadLetterRecord(
        project_id=P, run_id=cancelled, run_version=1, source="work", reason="by hand"
    )
    await services.db.in_tenant(P, lambda c: log_deadletters.record(c, record))
    await services.db.in_tenant(P, lambda c: control.cancel(c, cancelled, actor="ops"))
    shard = services.keys.shard_of(P)
    acked = await dead_letter_undecodable(
        services.db,
        services.redis,
        services.keys,
        stream=services.keys.work_stream(shard),
        group=WORKER_GROUP,
        entry_id="1-0",
        data=b"\xc1junk",
        reason="undecodable",
        delivery_count=1,
    )
    assert acked
    args = build_parser().parse_args(["deadletters", "redrive", "--all", "--json"])
    assert await args.run(settings, args) == 1  # one was left open
    results = {r["outcome"]: r for r in json_out(capsys)}
    assert set(results) == {"discarded", "left"}
    assert results["discarded"]["run_id"] == str(cancelled)
    assert results["left"]["detail"] == "undecodable message: nothing to re-drive"
    assert results["left"]["project_id"] == PLATFORM_PROJECT
    assert (await load(services.db, P, cancelled)).status == "CANCELLED"
    [junk] = [r for r in await all_rows(services.db) if r["resolved_at"] is None]
    assert (junk["message"], junk["source"], junk["group_name"]) == (b"\xc1junk", "work", "workers")
    assert await open_rows(services.db) == []  # the undecodable one is the platform's
    # An operator who has seen it discards it; discarding it again leaves nothing to do.
    junk_id = str(junk["dead_letter_id"])
    discard = build_parser().parse_args(["deadletters", "discard", junk_id, "--json"])
    assert await discard.run(settings, discard) == 0
    assert json_out(capsys)[0]["outcome"] == "discarded"
    assert await discard.run(settings, discard) == 1
    assert json_out(capsys)[0]["detail"] == "already resolved"
    [closed] = [
        r for r in await all_rows(services.db) if r["dead_letter_id"] == junk["dead_letter_id"]
    ]
    assert (closed["resolution"], closed["resolved_by"]) == (
        "discarded",
        f"cli:{getpass.getuser()}",
    )

    missing = build_parser().parse_args(["deadletters", "redrive", str(uuid.uuid4()), "--json"])
    assert await missing.run(settings, missing) == 1
    assert json_out(capsys)[0]["detail"] == "no such dead letter"


async def test_duplicates_of_one_occurrence_make_one_row(services: Services) -> None:
    """The same failure recorded again, an undecodable entry given up twice (a crash between
    the record and the XACK): one open row each."""
    run_id = await dead_lettered(services)
    [row] = await open_rows(services.db)
    again = DeadLetterRecord(
        project_id=P,
        run_id=run_id,
        run_version=row.run_version,
        source="work",
        reason="delivered 10 times",
    )
    assert await services.db.in_tenant(P, lambda c: log_deadletters.record(c, again)) is None
    later = msgspec.structs.replace(again, run_version=(row.run_version or 0) + 5)
    assert await services.db.in_tenant(P, lambda c: log_deadletters.record(c, later)) is None
    for _ in range(2):
        await dead_letter_undecodable(
            services.db,
            services.redis,
            services.keys,
            stream=services.keys.events_stream(0),
            group="projector:x",
            entry_id="5-0",
            data=b"junk",
            reason="undecodable",
            delivery_count=1,
        )
    rows = await all_rows(services.db)
    assert sorted((r["project_id"], r["source"]) for r in rows) == [
        (PLATFORM_PROJECT, "events"),
        (P, "work"),
    ]


async def test_the_reaper_records_the_dead_letter_with_the_failure(
    settings: Settings, services: Services, capsys: pytest.CaptureFixture[str]
) -> None:
    """R-19: the reaper fails a run whose every attempt ended with an expired lease, and its
    dead letter is written in the same transaction (no relay, no Redis involved); `runs show`
    tells each expiry, and a re-drive puts the run back to work."""
    db = services.db
    [run_id] = await create_runs(db, P, max_attempts=2)
    before = REGISTRY.get_sample_value("awooop_dead_letters_total") or 0.0
    for worker in ("w1", "w2"):
        assert await db.in_tenant(P, lambda c, w=worker: leases.claim(c, run_id, w, 0.01))
        await asyncio.sleep(0.05)  # the 0.01 s lease runs out
        await reap_once(db)
    failed = await load(db, P, run_id)
    assert (failed.status, failed.failure_code) == ("FAILED", "E-RUN-004")
    assert (REGISTRY.get_sample_value("awooop_dead_letters_total") or 0.0) == before + 1
    [entry] = await deadletters.list_entries(services, services.keys.shard_of(P))
    assert (entry.run_id, entry.run_version, entry.event_type) == (
        run_id,
        failed.version,
        "RunFailed",
    )
    assert (entry.reason, entry.code, entry.source) == (failed.failure_reason, "E-RUN-004", "work")
    assert (entry.group_name, entry.source_entry_id, entry.delivery_count) == ("", "", 0)
    blocked = await db.in_tenant(
        P,
        lambda c: blocked_facts.blocked_on(c, services.redis, services.keys, [run_id], 1.0),
    )
    decided = blocked[run_id]
    assert decided is not None and decided.reason is Reason.FAILED_DEAD_LETTERED

    show = build_parser().parse_args(["runs", "show", P, str(run_id), "--json"])
    assert await show.run(settings, show) == 0
    shown = json_out(capsys)
    expiries = [
        (line["event_type"], line["attempt"], line["worker_id"])
        for line in shown["timeline"]
        if line["event_type"] in ("RunRequeued", "RunFailed")
    ]
    assert expiries == [("RunRequeued", 1, "w1"), ("RunFailed", 2, "w2")]

    result = await deadletters.redrive(services, entry, actor="ops")
    assert result.outcome is Outcome.RETRIED
    assert (await load(db, P, run_id)).status == "PENDING"
    assert await open_rows(db) == []


async def test_a_redis_wipe_loses_no_dead_letter(
    settings: Settings, services: Services, capsys: pytest.CaptureFixture[str]
) -> None:
    """Redis loses everything (this test's prefix, as a restart without persistence): the
    list, the alert's gauge and blocked_on still show the dead letter, a re-drive works and a
    worker completes the run."""
    run_id = await dead_lettered(services)
    await lose_redis(services)
    assert [k async for k in services.redis.scan_iter(match=f"{services.keys.prefix}:*")] == []

    args = build_parser().parse_args(["deadletters", "list", "--json"])
    assert await args.run(settings, args) == 0
    [shown] = json_out(capsys)
    assert shown["run_id"] == str(run_id)
    stats = StatsLoops(services)
    await stats.sample_runs(None)  # type: ignore[arg-type]
    assert REGISTRY.get_sample_value("awooop_dead_letters_open", {"project_id": P}) == 1.0
    counts = await services.db.in_platform(
        lambda c: blocked_facts.count_by_reason(c, services.redis, services.keys, 1.0)
    )
    assert counts[(P, Reason.FAILED_DEAD_LETTERED.value)] == 1

    args = build_parser().parse_args(["deadletters", "redrive", shown["id"], "--json"])
    assert await args.run(settings, args) == 0
    assert json_out(capsys)[0]["outcome"] == "retried"
    await stats.sample_runs(None)  # type: ignore[arg-type]
    assert REGISTRY.get_sample_value("awooop_dead_letters_open", {"project_id": P}) is None
    assert (
        REGISTRY.get_sample_value("awooop_dead_letters_open", {"project_id": PLATFORM_PROJECT})
        == 0.0
    )

    # The relay rebuilds the lost shard from Postgres; a worker takes the run and finishes it.
    relay = Relay(settings=settings, redis=services.redis, keys=services.keys)
    try:
        await relay.drain()
    finally:
        await relay.close()
    worker, intake = streaming_worker(services.db, settings, services.redis, concurrency=2)
    async with serving_worker(worker, intake):

        async def completed() -> bool:
            return (await load(services.db, P, run_id)).status == "COMPLETED"

        await eventually(completed, timeout_s=60, what="the re-driven run COMPLETED")
    assert [e for e in handlers.EFFECTS if e["run_id"] == str(run_id)]
    assert await open_rows(services.db) == []


async def runs_of_that_schema(db: Database, project: str, count: int) -> list[uuid.UUID]:
    """Runs written as create_run writes them (the row and its RunCreated), the row holding
    only the columns the database's older schema has."""
    run_ids = []
    async with db.tenant(project) as conn:
        columns = {
            r["column_name"]
            for r in await conn.fetch(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_name = 'awooop_run_state'"
            )
        }
        now = await conn.fetchval("SELECT now()")
        for _ in range(count):
            event = factories.created(project_id=project, at=now)
            state = apply(None, event)
            fields = msgspec.structs.fields(RunState)
            named = [(f.name, v) for f, v in zip(fields, state_values(state), strict=True)]
            kept = [(name, value) for name, value in named if name in columns]
            places = ", ".join(f"${i}" for i in range(1, len(kept) + 1))
            await conn.execute(
                f"INSERT INTO awooop_run_state ({', '.join(n for n, _ in kept)}) VALUES ({places})",
                *[value for _, value in kept],
            )
            await eventlog.append(conn, run_stream_id(state.run_id), project, 0, [event], None)
            run_ids.append(state.run_id)
    return run_ids


async def test_the_migration_records_the_dead_letters_of_existing_failed_runs(
    pg_server_url: str, tmp_path: Path
) -> None:
    """Migration 0119 finds, in the log's run rows, every run FAILED because its work was
    dead-lettered (E-RUN-004, E-RUN-005) and gives it an open dead letter; other failures get
    none."""
    before = tmp_path / "migrations"
    before.mkdir()
    for path in MIGRATIONS_DIR.iterdir():
        if path.suffix == ".sql" and path.name < "0119":
            shutil.copy(path, before)
    name = f"awooop_dl_{uuid.uuid4().hex[:10]}"
    url = databases.with_database(pg_server_url, name)
    try:
        await migrate(url, before)
        db = await Database.open(url, max_size=2)
        try:
            [lettered, other] = await runs_of_that_schema(db, P, 2)
            async with db.tenant(P) as conn:
                for run_id, code in ((lettered, "E-RUN-005"), (other, "E-HANDLER-001")):
                    await conn.execute(
                        "UPDATE awooop_run_state SET status = 'FAILED', failure_code = $2, "
                        "failure_reason = 'why' WHERE run_id = $1",
                        run_id,
                        code,
                    )
            # A transaction that holds the run table makes the migration give up after its 5 s
            # lock timeout rather than queue every run write behind it, and try again (nothing
            # of it kept); once the holder is gone it applies.
            holder = await asyncpg.connect(url)
            with capture_context_logs() as logs:
                try:
                    async with holder.transaction():
                        await holder.execute("SELECT 1 FROM awooop_run_state LIMIT 1")
                        migrating = asyncio.create_task(migrate(url))
                        await eventually(
                            lambda: any(
                                e["event"] == "migration_retry"
                                and e["migration"] == "0119_dead_letters.sql"
                                for e in logs
                            ),
                            what="0119 given up after its lock timeout, to be tried again",
                            timeout_s=60,
                        )
                        assert not migrating.done()
                        async with db.platform() as conn:
                            assert await conn.fetchval(DEAD_LETTERS_TABLE) is None
                finally:
                    await holder.close()
                assert "0119_dead_letters.sql" in await asyncio.wait_for(migrating, 120)
            [retry, *_] = [e for e in logs if e["event"] == "migration_retry"]
            assert retry["error"] == "LockNotAvailableError"
            [row] = await open_rows(db)
            assert (row.run_id, row.run_version, row.code, row.reason) == (
                lettered,
                1,
                "E-RUN-005",
                "why",
            )
        finally:
            await db.close()
    finally:
        await databases.drop_database(pg_server_url, name)


@pytest.mark.parametrize(
    "argv",
    [
        ["deadletters", "redrive"],
        ["deadletters", "redrive", str(uuid.UUID(int=1)), "--all"],
        ["deadletters", "redrive", "nonsense"],
        ["deadletters", "redrive", "1:2-0"],
        ["deadletters", "redrive", str(uuid.UUID(int=1)), "--shard", "1"],
        ["deadletters", "redrive", str(uuid.UUID(int=1)), "--project", P],
        ["deadletters", "list", "--shard", "99"],
        ["deadletters", "list", "--project", "bad project"],
        ["deadletters", "discard", "1:2-0"],
    ],
)
async def test_bad_arguments_are_refused_before_anything_changes(
    settings: Settings, argv: list[str]
) -> None:
    args = build_parser().parse_args(argv)
    with pytest.raises(InvalidInputError):
        await args.run(settings, args)
