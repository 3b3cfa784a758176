"""Ingest -> relay -> worker processes -> COMPLETED on a private 3-master Redis Cluster,
with shards spread over all three masters and one master killed mid-run and started again
without its data.

Every process is real: ``awooop relay`` and two ``awooop worker --with-loops`` processes (so
the projectors, stats and reaper loops also run against the cluster); runs are ingested with the
producer library. While the master is down the cluster refuses commands (CLUSTERDOWN once the
node timeout passes) and the workers' polling path keeps taking runs from Postgres; once it is
back empty, the relay rebuilds the lost shards under a new epoch and the stream path resumes.
The cluster fixture raises when redis-server cannot be started: the test fails, never skips.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import pytest
from redis.exceptions import ResponseError

from awooop.commands.doctor_checks import run_checks
from awooop.commands.doctor_results import Check
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.events import run_stream_id
from awooop.producer import ChannelEvent, submit_many
from awooop.services import Services, redis_client
from awooop.streams.keys import WORKER_GROUP, Keys
from tests.support.connections import fit_workers
from tests.support.handlers import read_effects
from tests.support.runs import all_histories, check_single_holder, count_events
from tests.support.services import private_redis_cluster
from tests.support.waiting import eventually
from tests.support.workers import workers

PER_SHARD = 2  # projects per shard
DOWN_S = 3.0  # how long the cluster stays failed before the master comes back


def spread_projects(keys: Keys, per_shard: int) -> list[str]:
    """Project ids such that every shard has ``per_shard`` of them."""
    picked: dict[int, list[str]] = {shard: [] for shard in keys.shards()}
    n = 0
    while any(len(names) < per_shard for names in picked.values()):
        name, n = f"cluster-{n}", n + 1
        shard = keys.shard_of(name)
        if len(picked[shard]) < per_shard:
            picked[shard].append(name)
    return [name for shard in keys.shards() for name in picked[shard]]


async def ingest(
    db: Database, settings: Settings, projects: list[str], per_project: int, sleep: float
) -> list[uuid.UUID]:
    run_ids: list[uuid.UUID] = []
    for project in projects:
        events = [
            ChannelEvent("api", uuid.uuid4().hex, {"sleep": sleep}) for _ in range(per_project)
        ]
        done = await submit_many(db, project, events, settings=settings)
        run_ids += [d.run_id for d in done]
    return run_ids


async def count_status(db: Database, run_ids: list[uuid.UUID], statuses: list[str]) -> int:
    async with db.platform() as conn:
        n: int = await conn.fetchval(
            "SELECT count(*) FROM awooop_run_state WHERE run_id = ANY($1) AND status = ANY($2)",
            run_ids,
            statuses,
        )
    return n


@pytest.mark.long(25)
@pytest.mark.connections(32)
async def test_runs_complete_once_across_three_masters_with_a_master_restart(
    db: Database, settings: Settings, tmp_path: Path, pg_connections: int
) -> None:
    effects_file = str(tmp_path / "effects.jsonl")
    with private_redis_cluster() as cluster:
        clustered = msgspec.structs.replace(
            settings,
            redis_url=cluster.url,
            shard_count=4,
            lease_ttl_s=6.0,
            heartbeat_interval_s=0.5,
            reaper_interval_s=1.0,
            reclaim_interval_s=1.0,
            poll_interval_s=0.5,
            relay_poll_interval_s=0.2,
            relay_trim_interval_s=1.0,
            shutdown_grace_s=0.5,
            log_level="info",
        )
        # and a relay (1 connection) and, while they run, the doctor's pools (3 of 2)
        clustered = fit_workers(clustered, 2, concurrency=8, granted=pg_connections, others=1 + 6)
        keys = Keys(clustered.redis_key_prefix, clustered.shard_count)

        # Each shard's keys hash to one slot (the server says so), and the shards spread over
        # all three masters.
        owners: dict[int, int] = {}
        for shard in keys.shards():
            shard_keys = [
                keys.work_stream(shard),
                keys.events_stream(shard),
                keys.epoch(shard),
                keys.epoch_pending(shard),
            ]
            assert len({cluster.keyslot(k) for k in shard_keys}) == 1, shard
            owners[shard] = cluster.owner_of(keys.work_stream(shard))
        assert set(owners.values()) == {0, 1, 2}, owners
        projects = spread_projects(keys, PER_SHARD)
        assert {keys.shard_of(p) for p in projects} == set(keys.shards())
        victim = 0  # the master the URL names: the clients must find the cluster without it
        lost_shards = {s for s, node in owners.items() if node == victim}

        with workers(
            clustered,
            tmp_path,
            2,
            handler="tests.support.handlers:exclusive",
            args=("--concurrency", "8", "--with-loops"),
            env={"AWOOOP_TEST_SIDE_EFFECTS": effects_file},
        ) as procs:
            ids = [p.worker_id() for p in procs]
            # Wave 1 is running when the master goes away (16 slots, 0.2 s per run).
            wave1 = await ingest(db, clustered, projects, 20, sleep=0.2)
            await eventually(
                lambda: _at_least(count_status(db, wave1, ["COMPLETED"]), 20),
                timeout_s=30,
                what="first runs completed",
            )
            cluster.stop_node(victim)
            # Once the survivors call the cluster failed, Redis serves nobody: every claim
            # from then until the restart is the polling path's.
            await asyncio.to_thread(cluster.wait_state, "fail")
            failed_at = await _db_now(db)
            # Wave 2 is ingested while the cluster is failed (Postgres only, as always), so
            # only polling can take it; ingested earlier, the streams of the surviving
            # masters could take all of it before the cluster was declared failed.
            wave2 = await ingest(db, clustered, projects, 10, sleep=0.0)
            await asyncio.sleep(DOWN_S)
            claimed_while_down = await _claims_since(db, failed_at)
            await asyncio.to_thread(cluster.start_node, victim)
            # Wave 3 goes through the rebuilt streams.
            wave3 = await ingest(db, clustered, projects, 10, sleep=0.0)
            run_ids = wave1 + wave2 + wave3
            await eventually(
                lambda: _at_least(count_status(db, run_ids, ["COMPLETED"]), len(run_ids)),
                timeout_s=40,
                what=f"{len(run_ids)} runs completed",
            )
            await _check_streams(
                clustered, keys, Counter(keys.shard_of(p) for p in projects for _ in range(10))
            )
            doctor = {c.name: c for c in await _doctor(clustered)}

    # The polling path kept going while the cluster could not serve.
    assert claimed_while_down > 0, "no run was claimed while the cluster was down"
    # The relay rebuilt the lost shards (a shard's first build at start is not a reset).
    async with db.platform() as conn:
        resets = {
            r["shard"]: r["resets"]
            for r in await conn.fetch(
                "SELECT shard, resets FROM awooop_relay_shards WHERE shard_count = $1",
                keys.shard_count,
            )
        }
    assert {s for s, n in resets.items() if n >= 1} == lost_shards, (resets, lost_shards)
    assert {resets[s] for s in keys.shards() if s not in lost_shards} == {0}
    # Nothing lost, nothing done twice.
    completed = await count_events(db, "RunCompleted")
    assert sorted(completed[run_stream_id(r)] for r in run_ids) == [1] * len(run_ids)
    effects = read_effects(effects_file)
    begins = Counter(e["run_id"] for e in effects if e["what"] == "begin")
    assert sorted(begins[str(r)] for r in run_ids) == [1] * len(run_ids)
    assert {e["worker_id"] for e in effects} <= set(ids)
    histories = await all_histories(db)
    for run_id in run_ids:
        check_single_holder(histories[run_stream_id(run_id)])
    # awooop doctor reads the cluster too: Redis reachable, every shard's group in place.
    assert doctor["redis"].status == "OK", doctor["redis"]
    for shard in keys.shards():
        check = doctor[f"group {keys.work_stream(shard)} {WORKER_GROUP}"]
        assert check.status == "OK", check
    assert doctor["dead letters"].status == "OK", doctor["dead letters"]


async def _doctor(settings: Settings) -> list[Check]:
    services = await Services.open(settings, db_pool_size=2)
    try:
        return await run_checks(services)
    finally:
        await services.close()


async def _db_now(db: Database) -> Any:
    async with db.platform_writes() as conn:
        return await conn.fetchval("SELECT clock_timestamp()")


async def _claims_since(db: Database, since: Any) -> int:
    async with db.platform_writes() as conn:
        n: int = await conn.fetchval(
            "SELECT count(*) FROM awooop_events WHERE event_type = 'RunClaimed' "
            "AND recorded_at > $1",
            since,
        )
    return n


async def _at_least(count: Any, n: int) -> bool:
    return bool(await count >= n)


async def _check_streams(settings: Settings, keys: Keys, wave3: Counter[int]) -> None:
    """Every shard has its epoch again, its work stream took wave 3's dispatch events (a lost
    shard's stream was created afresh after the restart, so they went into the rebuilt one),
    and the workers group has read and acknowledged everything: the stream path is back.

    Waited for, not read once: the runs complete through the polling path while the relay may
    still be catching up (its leader rebuilding the lost shards, or replaced after a Redis
    call that hung on the stopped master), so the entries can come after the completions."""
    redis = redis_client(settings.redis_url)
    try:
        for shard in keys.shards():
            stream = keys.work_stream(shard)

            async def took_wave3(shard: int = shard, stream: str = stream) -> bool:
                if await redis.get(keys.epoch(shard)) is None:
                    return False
                info = await redis.xinfo_stream(stream)
                return bool(info["entries-added"] >= wave3[shard])

            await eventually(
                took_wave3,
                timeout_s=60,
                ignoring=(ResponseError,),  # no such stream yet
                what=f"{stream}: its epoch back and wave 3's dispatch events in it",
            )

            async def pending_and_lag(stream: str = stream) -> tuple[int, int]:
                [group] = [
                    g
                    for g in await redis.xinfo_groups(stream)
                    if g["name"] == WORKER_GROUP.encode()
                ]
                return group["pending"], group["lag"]

            await eventually(  # acks are flushed asynchronously
                pending_and_lag,
                equals=(0, 0),
                interval_s=0.1,
                what=f"{stream}: every entry read and acknowledged by the workers group",
            )
    finally:
        await redis.aclose()
