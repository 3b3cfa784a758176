"""The time-partitioned log: an old partition archived to a file and dropped while runs are
written, then run state rebuilt both from the snapshots and from the archive's files
(migrations/0100_partitioned_log.sql, awooop/eventlog/archive.py)."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
from prometheus_client import REGISTRY

from awooop.core.config import Settings
from awooop.core.context import PLATFORM_PROJECT
from awooop.core.db import Connection, Database
from awooop.core.errors import ArchiveFileError, ArchiveRefusedError
from awooop.core.events import run_stream_id
from awooop.core.loop_heartbeats import DatabaseHeartbeats
from awooop.core.loops import Heartbeat, LoopContext
from awooop.eventlog import archive, archive_files, partitions
from awooop.eventlog.state import TERMINAL, TRANSITIONS
from awooop.loops import log_partitions
from awooop.loops.registry import all_loops
from awooop.projections.lag import projector_lag
from awooop.runs import run_rows
from awooop.services import Services
from awooop.streams.relay import Relay
from tests.acceptance.test_replay_cli import awooop
from tests.support.factories import event_for
from tests.support.projection_workload import Workload
from tests.support.runs import create_runs
from tests.support.streams import keys_for

AGE = timedelta(days=21)
RETENTION = timedelta(days=7)

OLD_PARTITIONS = "SELECT awooop_ensure_log_partitions(now() - interval '35 days', now(), 7)"
AGE_EVENTS = """
UPDATE awooop_events SET recorded_at = recorded_at - $3::interval
WHERE stream_id = $1 AND version <= $2
"""
COUNT_EVENTS = "SELECT count(*) FROM awooop_events"
STREAM_VERSIONS = "SELECT stream_id, version FROM awooop_event_streams WHERE stream_id LIKE 'run-%'"
PUBLISHED = (
    "UPDATE awooop_relay_cursor SET tx_id = pg_current_xact_id()::text::bigint, "
    "position = 1 << 62 WHERE name = 'events'"
)


async def finish(db: Database, project: str, run_id: uuid.UUID) -> None:
    """Cancel the run if it is still live (every live state allows RunCancelled)."""
    async with db.tenant(project) as conn:
        state, _ = await run_rows.lock(conn, run_id)
    if state.status in TERMINAL:
        return

    async def tx(conn: Connection) -> None:
        await run_rows.record(conn, run_id, lambda s, now: event_for("RunCancelled", s, at=now))

    assert "RunCancelled" in TRANSITIONS[state.status]
    await db.in_tenant(project, tx)


async def age(db: Database, stream_id: str, through_version: int) -> int:
    async with db.platform_writes() as conn:
        status = await conn.execute(AGE_EVENTS, stream_id, through_version, AGE)
    return int(status.split()[-1])


async def archive_all_due(settings: Settings, directory: Path) -> list[archive.ArchiveResult]:
    results = []
    while (
        result := await archive.archive_due(
            settings.database_url, directory, retention=RETENTION, projector_lag=projector_lag
        )
    ) is not None:
        results.append(result)
    return results


@pytest.mark.connections(14)
async def test_a_partition_archived_and_dropped_under_traffic_rebuilds_from_snapshots_and_files(
    settings: Settings, db: Database, redis: Any, tmp_path: Path
) -> None:
    async with db.platform_writes() as conn:
        await conn.execute(OLD_PARTITIONS)
    history = Workload(db, seed=11)
    await history.run(walkers=2, runs_each=10, max_steps=8)
    for project, run_id in history.run_ids:
        await finish(db, project, run_id)
    async with db.platform() as conn:
        heads = {r["stream_id"]: r["version"] for r in await conn.fetch(STREAM_VERSIONS)}
    # Two runs in three lie wholly in the old partition; the others began there and ended now.
    aged = 0
    spanning: list[uuid.UUID] = []
    for i, (_, run_id) in enumerate(history.run_ids):
        stream = run_stream_id(run_id)
        through = heads[stream] if i % 3 else max(1, heads[stream] // 2)
        if through < heads[stream]:
            spanning.append(run_id)
        aged += await age(db, stream, through)
    assert len(spanning) >= 3 and aged > 20

    archive_dir = tmp_path / "archive"
    relay = Relay(settings=settings, redis=redis, keys=keys_for(settings))
    traffic = Workload(db, seed=12, projects=("alpha", "delta"))
    stop = asyncio.Event()

    async def publishing() -> None:
        while not stop.is_set():
            await relay.drain()
            await asyncio.sleep(0.02)

    try:
        await relay.drain()  # the relay has published the old partition (the archive checks)
        async with db.platform() as conn:
            total_before = await conn.fetchval(COUNT_EVENTS)
        relaying = asyncio.create_task(publishing())
        writing = asyncio.create_task(traffic.run(walkers=3, runs_each=15, max_steps=6))
        results = await archive_all_due(settings, archive_dir)
        await writing
        stop.set()
        await relaying
        await relay.drain()
    finally:
        stop.set()
        await relay.close()

    archived = [r for r in results if r.events]
    assert len(archived) == 1, [(r.partition, r.events) for r in results]
    assert archived[0].events == aged and archived[0].dropped
    assert all(r.dropped for r in results)  # the empty older partitions went too
    async with db.platform() as conn:
        names = {p.name for p in await partitions.partitions(conn)}
        catalogue = await conn.fetch("SELECT * FROM awooop_log_archives")
        total_after = await conn.fetchval(COUNT_EVENTS)
    assert not names & {r.partition for r in results}
    assert {r["partition_name"] for r in catalogue} == {r.partition for r in results}
    assert total_after == total_before - aged + traffic.events

    file = archive_dir / archive_files.file_name(archived[0].partition)
    sidecar = file.with_name(file.name + ".sha256")
    digest = hashlib.sha256(file.read_bytes()).hexdigest()
    assert sidecar.read_text() == f"{digest}  {file.name}\n"
    lines = gzip.decompress(file.read_bytes()).splitlines()
    assert msgspec.json.decode(lines[0])["format"] == archive_files.FORMAT
    assert msgspec.json.decode(lines[-1]) == {"end": True, "events": aged}
    assert len(lines) == aged + 2

    # Rebuilt from the snapshots plus the live log, then from the files plus the live log.
    code, out, err = await awooop(settings, "replay", "run_state", "--verify")
    assert code == 0, out + err
    assert "verify: no difference" in out
    code, out, err = await awooop(
        settings, "replay", "run_state", "--from-archive", str(archive_dir), "--verify"
    )
    assert code == 0, out + err
    assert f"archive: {aged:,} events read from archived partitions" in out
    assert "verify: no difference" in out

    # The tail: the runs the last events touched, the spanning ones folded from their snapshots.
    code, out, err = await awooop(settings, "replay", "run_state", "--tail", "100000")
    assert code == 0, out + err
    assert "verify: no difference" in out
    forged = spanning[0]
    async with db.platform_writes() as conn:
        await conn.execute(
            "UPDATE awooop_run_state SET failure_reason = 'forged' WHERE run_id = $1", forged
        )
    code, out, err = await awooop(settings, "replay", "run_state", "--tail", "100000")
    assert code == 1, out + err
    assert f"different run_id={forged} (failure_reason)" in out

    # A projection that cannot start from a snapshot says what it needs.
    code, out, err = await awooop(settings, "replay", "run_timeline", "--verify")
    assert code == 1 and "E-REPLAY-005" in out + err and "--from-archive" in out + err


async def test_a_live_run_keeps_its_partition(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    async with db.platform_writes() as conn:
        await conn.execute(OLD_PARTITIONS)
    (run_id,) = await create_runs(db, "alpha")
    await age(db, run_stream_id(run_id), 1)
    async with db.platform_writes() as conn:  # as if the relay had published it
        await conn.execute(PUBLISHED)
    with pytest.raises(ArchiveRefusedError, match=f"run {run_id} is PENDING"):
        await archive_all_due(settings, tmp_path)
    async with db.platform() as conn:
        events = await conn.fetchval(COUNT_EVENTS)
        archives = await conn.fetch("SELECT partition_name, events FROM awooop_log_archives")
    assert events == 1
    assert all(r["events"] == 0 for r in archives)  # only the empty partitions before it went


async def test_an_unpublished_partition_is_not_archived(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    async with db.platform_writes() as conn:
        await conn.execute(OLD_PARTITIONS)
    (run_id,) = await create_runs(db, "alpha")
    await finish(db, "alpha", run_id)
    await age(db, run_stream_id(run_id), 2)
    with pytest.raises(ArchiveRefusedError, match="relay has not published"):
        await archive_all_due(settings, tmp_path)


async def test_a_projector_behind_the_partition_keeps_it_by_the_check_it_is_handed(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    async with db.platform_writes() as conn:
        await conn.execute(OLD_PARTITIONS)
    (run_id,) = await create_runs(db, "alpha")
    await finish(db, "alpha", run_id)
    await age(db, run_stream_id(run_id), 2)
    async with db.platform_writes() as conn:  # as if the relay had published it
        await conn.execute(PUBLISHED)
    heartbeats = DatabaseHeartbeats(db)
    for loop_name in ("projector:run_state_view", "projector:gone"):
        await heartbeats.record(Heartbeat(loop_name, PLATFORM_PROJECT, "platform", 1.0, True, 0))
    # No run_state_view projector ever applied the run; "gone" is no projection of this build.
    behind = f"projector run_state_view has not applied stream {run_stream_id(run_id)} yet"
    with pytest.raises(ArchiveRefusedError, match=behind):
        await archive_all_due(settings, tmp_path)

    asked: list[str] = []

    async def caught_up(_conn: Connection, name: str, *_range: object) -> str | None:
        asked.append(name)
        return None

    while await archive.archive_due(
        settings.database_url, tmp_path, retention=RETENTION, projector_lag=caught_up
    ):
        pass
    assert set(asked) == {"run_state_view", "gone"}
    async with db.platform() as conn:
        assert await conn.fetchval(COUNT_EVENTS) == 0


async def test_a_changed_or_missing_archive_file_stops_the_replay(
    settings: Settings, db: Database, redis: Any, tmp_path: Path
) -> None:
    async with db.platform_writes() as conn:
        await conn.execute(OLD_PARTITIONS)
    run_ids = await create_runs(db, "alpha", 4)
    for run_id in run_ids:
        await finish(db, "alpha", run_id)
        await age(db, run_stream_id(run_id), 2)
    relay = Relay(settings=settings, redis=redis, keys=keys_for(settings))
    try:
        await relay.drain()
    finally:
        await relay.close()
    results = await archive_all_due(settings, tmp_path)
    (done,) = [r for r in results if r.events]
    assert done.events == 8
    file = tmp_path / archive_files.file_name(done.partition)

    content = bytearray(gzip.decompress(file.read_bytes()))
    content[content.index(b'"alpha"') + 1] = ord("A")  # one changed byte, recompressed
    file.write_bytes(gzip.compress(bytes(content)))
    with pytest.raises(ArchiveFileError, match="sha256"):
        archive_files.read_archive(file)
    code, out, err = await awooop(settings, "replay", "run_state", "--from-archive", str(tmp_path))
    assert code == 1 and "E-ARCHIVE-001" in out + err

    file.unlink()
    code, out, err = await awooop(settings, "replay", "run_state", "--from-archive", str(tmp_path))
    assert code == 1 and "E-ARCHIVE-001" in out + err and done.partition in out + err


async def test_the_loop_extends_the_partitions_and_archives_what_is_due(
    settings: Settings, db: Database, redis: Any, tmp_path: Path
) -> None:
    async with db.platform_writes() as conn:
        await conn.execute(OLD_PARTITIONS)
    run_ids = await create_runs(db, "alpha", 2)
    for run_id in run_ids:
        await finish(db, "alpha", run_id)
        await age(db, run_stream_id(run_id), 2)
    relay = Relay(settings=settings, redis=redis, keys=keys_for(settings))
    try:
        await relay.drain()
    finally:
        await relay.close()
    archive_dir = tmp_path / "archive"
    looped = msgspec.structs.replace(
        settings, log_archive_dir=str(archive_dir), log_retention_days=RETENTION.days
    )
    services = await Services.open(looped, db_pool_size=2)
    try:
        (spec,) = [s for s in all_loops(services) if s.name == log_partitions.LOOP_NAME]
        archived = REGISTRY.get_sample_value("awooop_log_partitions_archived_total") or 0.0
        ctx = LoopContext(project_id=spec.resolved_project_id())
        while True:  # one partition per iteration; it wakes itself while one was archived
            ctx.wakeup.clear()
            await spec.body(ctx)
            if not ctx.wakeup.is_set():
                break
    finally:
        await services.close()
    async with db.platform() as conn:
        parts = await partitions.partitions(conn)
        catalogue = await conn.fetch("SELECT partition_name, events FROM awooop_log_archives")
        left = await conn.fetchval(COUNT_EVENTS)
    ahead = REGISTRY.get_sample_value("awooop_log_partition_ahead_seconds")
    assert ahead is not None and ahead >= 13 * 86400  # 14 days ahead
    assert sum(r["events"] for r in catalogue) == 4 and left == 0
    assert (
        archive_dir / archive_files.file_name(max(catalogue, key=lambda r: r["events"])[0])
    ).exists()
    assert parts and not {p.name for p in parts} & {r["partition_name"] for r in catalogue}
    done = REGISTRY.get_sample_value("awooop_log_partitions_archived_total") or 0.0
    assert done - archived == len(catalogue)
