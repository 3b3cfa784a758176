"""Pause and resume (flow control) on real Postgres and Redis: the claim statements hold a paused
run back on every path (stream, polling, expired lease), intake goes on accepting and
deduplicating, running attempts finish, and a resume starts the waiting runs oldest first, each
exactly once, without the polling interval (the stream variant keeps polling out: 60 s)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import DeliveryLimitError
from awooop.core.events import RunCreated, run_stream_id
from awooop.core.loops import run_loop
from awooop.eventlog.runs import create_run
from awooop.loops.relay import relay_spec
from awooop.runs import leases, pauses
from awooop.runs.blocked import Reason
from awooop.runs.blocked_facts import blocked_on
from awooop.runs.leases import suspects
from awooop.runs.pause_rules import Scope, holds
from awooop.streams.keys import WORKER_GROUP, Keys
from awooop.streams.relay import Relay
from awooop.worker.runtime import Worker
from tests.support import handlers
from tests.support.ingest import Ingest, ingest_app
from tests.support.runs import count_events, load
from tests.support.waiting import eventually
from tests.support.webhooks import PROJECT, fresh
from tests.support.workers import serving_worker, streaming_worker

P = PROJECT
pytestmark = pytest.mark.fast("streams")


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[Ingest]:
    """The ingest app (the api channel's intake, deduplicating) on real services."""
    async with ingest_app(settings) as opened:
        yield opened


def keys_of(settings: Settings) -> Keys:
    return Keys(settings.redis_key_prefix, settings.shard_count)


@asynccontextmanager
async def relay_running(settings: Settings, redis: Any) -> AsyncIterator[None]:
    relay = Relay(settings=settings, redis=redis, keys=keys_of(settings))
    stop = asyncio.Event()
    task = asyncio.create_task(run_loop(relay_spec(relay, settings), stop))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        await relay.close()


async def pause(db: Database, project: str, scope: Scope = Scope.PROJECT, key: str = "") -> None:
    await db.in_tenant(
        project,
        lambda c: pauses.pause(c, project, scope, key, reason="maintenance", actor="test"),
    )


async def resume(db: Database, project: str, scope: Scope = Scope.PROJECT, key: str = "") -> None:
    await db.in_tenant(project, lambda c: pauses.resume(c, project, scope, key, actor="test"))


async def submit(ingest: Ingest) -> uuid.UUID:
    """One API submission, and its repeat: deduplicated to the same run."""
    delivery = fresh("api")
    first = await ingest.post(delivery)
    assert first.status_code == 202, first.text
    repeat = await ingest.post(delivery)
    assert repeat.status_code == 200 and repeat.json()["code"] == "E-IDEMPOTENT-001"
    assert repeat.json()["run_ids"] == first.json()["run_ids"]
    return uuid.UUID(first.json()["run_ids"][0])


async def settled_stream(redis: Any, keys: Keys) -> bool:
    """Every work entry delivered to the workers group and acknowledged."""
    stream = keys.work_stream(keys.shard_of(P))
    if not await redis.exists(stream):
        return False
    groups = await redis.xinfo_groups(stream)
    mine = [g for g in groups if g["name"] in (WORKER_GROUP, WORKER_GROUP.encode())]
    return bool(mine) and mine[0]["lag"] == 0 and mine[0]["pending"] == 0


async def claims_of(db: Database, run_id: uuid.UUID) -> int:
    return (await count_events(db, "RunClaimed"))[run_stream_id(run_id)]


async def status(db: Database, run_id: uuid.UUID, project: str = P) -> str:
    return str((await load(db, project, run_id)).status)


def started_order(run_ids: list[uuid.UUID]) -> list[uuid.UUID]:
    wanted = {str(r) for r in run_ids}
    firsts = [e["run_id"] for e in handlers.EFFECTS if e["what"] == "one" and e["run_id"] in wanted]
    return [uuid.UUID(r) for r in firsts]


async def wait_for_listener(worker: Worker) -> None:
    await asyncio.wait_for(worker.cancel_listener.connected.wait(), 30)


@pytest.mark.connections(14)
async def test_a_pause_holds_new_attempts_lets_running_ones_finish_and_resume_starts_them_in_order(
    db: Database, fast: Settings, redis: Any, api: Ingest
) -> None:
    keys = keys_of(fast)
    worker, intake = streaming_worker(db, fast, redis, concurrency=1)
    async with relay_running(fast, redis), serving_worker(worker, intake):
        await wait_for_listener(worker)
        # A run that takes a while (3 s between its steps): it is RUNNING when the pause comes.
        [running] = await create_runs_of(db, P, 1, payload={"sleep": 3.0})
        await eventually(lambda: status(db, running), equals="RUNNING", what="first run taken")
        await pause(db, P)
        waiting = [await submit(api) for _ in range(3)]
        # Delivered and acknowledged, yet never claimed: the claim statement said paused.
        await eventually(lambda: settled_stream(redis, keys), what="every entry acknowledged")
        await eventually(lambda: status(db, running), equals="COMPLETED", what="running finished")
        for run_id in waiting:
            state = await load(db, P, run_id)
            assert (str(state.status), state.attempt_count) == ("PENDING", 0)
            assert await claims_of(db, run_id) == 0
        async with db.tenant(P) as conn:
            found = await blocked_on(conn, redis, keys, waiting, fast.lease_ttl_s)
        for run_id in waiting:
            why = found[run_id]
            assert why is not None and why.reason is Reason.PAUSED
            assert why.next_action == f"awooop projects resume {P}"
            assert "maintenance" in why.summary

        await resume(db, P)
        for run_id in waiting:
            await eventually(lambda r=run_id: status(db, r), equals="COMPLETED", what="resumed")
    assert [await claims_of(db, r) for r in waiting] == [1, 1, 1]
    assert started_order(waiting) == waiting  # one slot: oldest first


@pytest.mark.connections(9)
async def test_a_run_announced_before_the_pause_is_not_claimed_after_it(
    db: Database, fast: Settings, redis: Any
) -> None:
    keys = keys_of(fast)
    async with relay_running(fast, redis):
        [run_id] = await create_runs_of(db, P, 1)
        stream = keys.work_stream(keys.shard_of(P))
        await eventually(lambda: redis.xlen(stream), equals=1, what="the run announced")
        await pause(db, P)
        worker, intake = streaming_worker(db, fast, redis, concurrency=2)
        async with serving_worker(worker, intake):
            await wait_for_listener(worker)
            await eventually(lambda: settled_stream(redis, keys), what="its entry acknowledged")
            assert (await claims_of(db, run_id), await status(db, run_id)) == (0, "PENDING")
            await resume(db, P)
            await eventually(lambda: status(db, run_id), equals="COMPLETED", what="resumed run")
    assert await claims_of(db, run_id) == 1


async def create_runs_of(
    db: Database,
    project: str,
    count: int,
    channel: str = "api",
    contract: str | None = None,
    payload: Any = None,
) -> list[uuid.UUID]:
    run_ids = [uuid.uuid4() for _ in range(count)]
    async with db.tenant(project) as conn:
        now = await conn.fetchval("SELECT now()")
        for run_id in run_ids:
            event = RunCreated(
                at=now,
                run_id=run_id,
                project_id=project,
                channel_type=channel,
                provider_event_id=str(run_id),
                input={} if payload is None else payload,
                max_attempts=3,
                contract_id=contract,
            )
            await create_run(conn, event)
    return run_ids


@pytest.mark.fast("worker")
@pytest.mark.connections(10)
async def test_a_channel_or_contract_pause_holds_only_its_runs_on_the_polling_path(
    db: Database, fast: Settings
) -> None:
    await pause(db, P, Scope.CHANNEL, "telegram")
    await pause(db, P, Scope.CONTRACT, "triage")
    await pause(db, "p2")  # another project's pause holds nothing of P
    free = await create_runs_of(db, P, 2) + await create_runs_of(db, P, 1, contract="other")
    by_channel = await create_runs_of(db, P, 2, channel="telegram")
    by_contract = await create_runs_of(db, P, 2, contract="triage")
    worker = Worker(db=db, settings=fast, handler=handlers.journaled, concurrency=4)
    await worker.run_until_idle(max_s=30)
    assert [await status(db, r) for r in free] == ["COMPLETED"] * 3
    assert [await status(db, r) for r in by_channel + by_contract] == ["PENDING"] * 4
    # The claim statements' rule (_run_paused.sql) is pause_rules.holds, run by run.
    active = await db.in_platform(lambda c: pauses.listing(c, None))
    for run_id in free + by_channel + by_contract:
        state = await load(db, P, run_id)
        held = any(
            holds(p, state.channel_type, state.contract_id)
            for p in active
            if p.project_id == state.project_id
        )
        assert held == (str(state.status) == "PENDING"), (run_id, held, state.status)

    await resume(db, P, Scope.CHANNEL, "telegram")
    await worker.run_until_idle(max_s=30)
    assert [await status(db, r) for r in by_channel] == ["COMPLETED"] * 2
    assert [await status(db, r) for r in by_contract] == ["PENDING"] * 2


@pytest.mark.fast("worker")
async def test_an_expired_lease_of_a_paused_run_is_reaped_but_not_claimed(
    db: Database, fast: Settings
) -> None:
    [run_id] = await create_runs_of(db, P, 1)
    claimed = await db.in_platform_writes(lambda c: leases.claim(c, run_id, "gone", 0.01))
    assert claimed is not None
    await pause(db, P)

    async def expired() -> bool:
        row = await db.in_platform(
            lambda c: c.fetchval(
                "SELECT lease_until < now() FROM awooop_run_state WHERE run_id = $1", run_id
            )
        )
        return bool(row)

    await eventually(expired, what="the lease expired")
    taken = await db.in_platform_writes(lambda c: leases.take_expired(c, run_id, "me", 5.0))
    assert taken is not None and not taken.claimed
    assert str(taken.state.status) == "PENDING"
    batch = await leases.RunStatements(db).claim_many([run_id], "me", 5.0)
    assert batch.claimed == {} and batch.paused == frozenset({run_id})
    assert await db.in_platform_writes(lambda c: leases.claim(c, run_id, "me", 5.0)) is None
    await resume(db, P)
    again = await leases.RunStatements(db).claim_many([run_id], "me", 5.0)
    assert set(again.claimed) == {run_id}


async def test_pauses_are_tenant_rows(db: Database) -> None:
    await pause(db, P)
    await pause(db, "p2", Scope.CHANNEL, "api")
    mine = await db.in_tenant(P, lambda c: pauses.listing(c, P))
    assert [(p.project_id, p.scope) for p in mine] == [(P, Scope.PROJECT)]
    seen = await db.in_tenant(P, lambda c: pauses.listing(c, None, history=True))
    assert {p.project_id for p in seen} == {P}  # row-level security hides p2's
    with pytest.raises(Exception, match="row-level security"):
        await db.in_tenant(
            P,
            lambda c: pauses.pause(c, "p2", Scope.PROJECT, "", reason="", actor="intruder"),
        )
    # Pausing twice is one pause; resuming keeps the row as history.
    again, created = await db.in_tenant(
        P, lambda c: pauses.pause(c, P, Scope.PROJECT, "", reason="other", actor="b")
    )
    assert not created and again.reason == "maintenance"
    await resume(db, P)
    history = await db.in_tenant(P, lambda c: pauses.listing(c, P, history=True))
    assert [(p.active, p.resumed_by) for p in history] == [(False, "test")]
    assert await db.in_tenant(P, lambda c: pauses.listing(c, P)) == []


@pytest.mark.fast("worker")
async def test_a_paused_suspect_neither_counts_as_waiting_nor_is_claimed_alone(
    db: Database,
) -> None:
    [run_id] = await create_runs_of(db, P, 1)
    # A suspect as the reaper leaves one (the mark is all the probes read).
    await db.in_platform_writes(
        lambda c: c.execute(
            "UPDATE awooop_run_state SET suspect_worker_id = 'dead' WHERE run_id = $1", run_id
        )
    )
    await pause(db, P)
    assert not await db.in_platform(suspects.suspects_waiting)
    assert await db.in_platform_writes(lambda c: suspects.claim_suspect(c, "me", 5.0)) is None
    await resume(db, P)
    assert await db.in_platform(suspects.suspects_waiting)
    taken = await db.in_platform_writes(lambda c: suspects.claim_suspect(c, "me", 5.0))
    assert taken is not None and taken.run_id == run_id


@pytest.mark.fast("worker")
async def test_a_paused_run_is_not_failed_for_its_messages_deliveries(db: Database) -> None:
    [run_id] = await create_runs_of(db, P, 1)
    await pause(db, P)

    def give_up(c: Any) -> Any:
        return leases.fail_undeliverable(
            c, run_id, "me", "delivered too often", DeliveryLimitError.code
        )

    assert await db.in_tenant(P, give_up) is None
    assert await status(db, run_id) == "PENDING"
    await resume(db, P)
    failed = await db.in_tenant(P, give_up)
    assert failed is not None and str(failed.status) == "FAILED"
