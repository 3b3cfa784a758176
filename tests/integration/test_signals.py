"""Signals and event waits on real Postgres: before the wait, during it, after its timeout, the
same key twice, a signal at the timeout instant (exactly one outcome), the timers loop's firing,
bad input (codes, nothing written), the HTTP route and the CLI (docs/workers.md)."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from awooop import producer
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import (
    InvalidInputError,
    PayloadTooLargeError,
    RunNotFoundError,
    SignalLimitError,
    SignalRunFinishedError,
)
from awooop.ingest import credentials
from awooop.projections.registry import get
from awooop.projections.replay import replay
from awooop.runs import control, leases, signals, timers
from tests.support.http import app_client
from tests.support.logins import bound_login
from tests.support.runs import create_runs, event_types, load
from tests.support.workers import cli

P = "proj-sig"
LIMITS: dict[str, Any] = {"payload_max_bytes": 1024, "kept_max": 3}


async def running(db: Database, project: str = P) -> uuid.UUID:
    [run_id] = await create_runs(db, project)
    assert await db.in_tenant(project, lambda c: leases.claim(c, run_id, "w1", 30)) is not None
    return run_id


async def wait(
    db: Database, run_id: uuid.UUID, time_out: timedelta | None = None, match: Any = None
) -> tuple[bool, Any]:
    return await db.in_tenant(
        P,
        lambda c: signals.take_or_wait(
            c,
            run_id,
            "w1",
            1,
            step="event:paid:1",
            name="paid",
            match=match,
            time_out=time_out,
            due_at=None,
        ),
    )


async def send(db: Database, run_id: uuid.UUID, payload: Any, key: str, name: str = "paid") -> Any:
    return await db.in_tenant(
        P, lambda c: signals.send(c, run_id, name, payload, key=key, sent_by="t", **LIMITS)
    )


async def rows(db: Database, table: str) -> int:
    async with db.platform() as conn:
        return int(await conn.fetchval(f"SELECT count(*) FROM {table}"))


async def test_a_signal_before_the_wait_is_kept_and_taken_when_it_starts(db: Database) -> None:
    run_id = await running(db)
    sent = await send(db, run_id, {"amount": 3}, "k1")
    assert not sent.delivered and not sent.duplicate
    assert await wait(db, run_id) == (True, {"amount": 3})
    state = await load(db, P, run_id)
    assert state.status == "RUNNING" and state.saga_steps["event:paid:1"]["result"] == {"amount": 3}
    again = await send(db, run_id, {"amount": 3}, "k1")
    assert again.duplicate and again.delivered and again.signal_id == sent.signal_id


async def test_a_signal_during_the_wait_resumes_the_run_once(db: Database) -> None:
    run_id = await running(db)
    assert await wait(db, run_id, match={"order": 7}) == (False, None)
    state = await load(db, P, run_id)
    assert state.status == "WAITING_EVENT" and state.worker_id is None and state.lease_until is None
    other = await send(db, run_id, {"order": 8}, "k0")  # does not match: kept
    assert not other.delivered
    sent = await send(db, run_id, {"order": 7, "amount": 5}, "k1")
    assert sent.delivered
    assert (await send(db, run_id, {"order": 7}, "k1")).duplicate  # same key: nothing new
    state = await load(db, P, run_id)
    assert state.status == "RESUMED"
    assert state.saga_steps["event:paid:1"]["result"] == {"order": 7, "amount": 5}
    assert (await event_types(db, P, run_id)).count("SignalDelivered") == 1
    assert await rows(db, "awooop_run_waits") == 0
    assert await rows(db, "awooop_signals") == 2


async def test_a_wait_times_out_and_a_late_signal_is_only_kept(db: Database) -> None:
    run_id = await running(db)
    await wait(db, run_id, time_out=timedelta(seconds=0.2))
    assert await db.in_platform_writes(lambda c: timers.fire_due(c, 10)) == []  # not due yet
    await asyncio.sleep(0.3)
    [(state, fired)] = await db.in_platform_writes(lambda c: timers.fire_due(c, 10))
    assert state.status == "RESUMED" and fired.kind == "event"
    assert state.saga_steps["event:paid:1"]["ended"] == "timeout"
    assert not (await send(db, run_id, {"late": True}, "k1")).delivered
    types = await event_types(db, P, run_id)
    assert types.count("TimerFired") == 1 and "SignalDelivered" not in types
    assert await rows(db, "awooop_run_waits") == 0


@pytest.mark.parametrize("attempt", range(12))
async def test_a_signal_at_the_timeout_instant_has_exactly_one_outcome(
    db: Database, attempt: int
) -> None:
    run_id = await running(db)
    await wait(db, run_id, time_out=timedelta(seconds=0.05))
    await asyncio.sleep(0.04 + attempt * 0.002)  # around the due time, both at once
    results = await asyncio.gather(
        db.in_platform_writes(lambda c: timers.fire_due(c, 10)),
        send(db, run_id, {"n": attempt}, f"k{attempt}"),
        return_exceptions=True,
    )
    assert not [r for r in results if isinstance(r, BaseException)], results
    if not results[0] and not results[1].delivered:  # the timer was not due yet: fire it now
        await asyncio.sleep(0.1)
        await db.in_platform_writes(lambda c: timers.fire_due(c, 10))
    types = await event_types(db, P, run_id)
    assert types.count("TimerFired") + types.count("SignalDelivered") == 1, types
    state = await load(db, P, run_id)
    ended = state.saga_steps["event:paid:1"]["ended"]
    assert state.status == "RESUMED" and ended == ("signal" if results[1].delivered else "timeout")


async def test_pending_signals_are_delivered_by_the_loop(db: Database) -> None:
    run_id = await running(db)
    await wait(db, run_id)
    async with db.platform_writes() as conn:  # as the producer writes them: the row alone, pending
        await conn.execute(
            "INSERT INTO awooop_signals (signal_id, project_id, run_id, name, signal_key, "
            "payload, sent_by, pending) VALUES ($1, $2, $3, 'paid', 'k1', $4, 'p', true)",
            uuid.uuid4(),
            P,
            run_id,
            {"via": "producer"},
        )
    assert await db.in_platform_writes(lambda c: signals.deliver_pending(c, 10)) == (1, 1)
    state = await load(db, P, run_id)
    assert state.status == "RESUMED" and state.saga_steps["event:paid:1"]["ended"] == "signal"
    assert await db.in_platform_writes(lambda c: signals.deliver_pending(c, 10)) == (0, 0)


async def test_cancelling_a_waiting_run_removes_its_wait(db: Database) -> None:
    run_id = await running(db)
    await wait(db, run_id, time_out=timedelta(hours=1))
    assert await rows(db, "awooop_run_waits") == 1
    await db.in_tenant(P, lambda c: control.cancel(c, run_id, actor="ops", reason="stop"))
    assert await rows(db, "awooop_run_waits") == 0
    with pytest.raises(SignalRunFinishedError) as finished:
        await send(db, run_id, {}, "k9")
    assert finished.value.code == "E-SIGNAL-002"


async def test_bad_signals_are_refused_with_a_code_and_write_nothing(db: Database) -> None:
    run_id = await running(db)
    cases: list[tuple[type[Exception], str, Any, str]] = [
        (InvalidInputError, "x" * 201, {}, "k"),
        (InvalidInputError, "bad\nname", {}, "k"),
        (InvalidInputError, "paid", {}, ""),
        (PayloadTooLargeError, "paid", {"big": "x" * 2000}, "k"),
    ]
    for error, name, payload, key in cases:
        with pytest.raises(error):
            await send(db, run_id, payload, key, name=name)
    with pytest.raises(RunNotFoundError):
        await send(db, uuid.uuid4(), {}, "k")
    [foreign] = await create_runs(db, "proj-other")
    with pytest.raises(RunNotFoundError):  # another project's run is not seen
        await send(db, foreign, {}, "k")
    for n in range(3):
        await send(db, run_id, {}, f"k{n}")
    with pytest.raises(SignalLimitError) as limit:
        await send(db, run_id, {}, "k3")
    assert limit.value.code == "E-SIGNAL-003"
    assert await rows(db, "awooop_signals") == 3


async def test_the_route_sends_signals_and_refuses_another_projects_token(
    settings: Settings, db: Database
) -> None:
    run_id = await running(db)
    await wait(db, run_id)
    _, manage = await credentials.create_management_token(db, P, "manage")
    _, foreign = await credentials.create_management_token(db, "other-project", "manage")
    url = f"/v1/projects/{P}/runs/{run_id}/signals/paid"
    async with app_client(settings, db, bearer=foreign) as http:
        refused = await http.post(url, json={"payload": {"a": 1}, "key": "k1"})
        assert refused.status_code == 403 and refused.json()["code"] == "E-AUTH-002"
    assert await rows(db, "awooop_signals") == 0
    async with app_client(settings, db, bearer=manage) as http:
        bad = await http.post(url, json={"payload": {"a": 1}})
        assert bad.status_code == 400 and bad.json()["code"] == "E-INPUT-001"
        sent = await http.post(url, json={"payload": {"a": 1}}, headers={"Idempotency-Key": "k1"})
        assert sent.status_code == 201 and sent.json()["delivered"] is True
        again = await http.post(url, json={"payload": {"a": 1}, "key": "k1"})
        assert again.status_code == 200 and again.json()["duplicate"] is True
        missing = await http.post(f"/v1/projects/{P}/runs/{uuid.uuid4()}/signals/paid", json={})
        assert missing.status_code in (400, 404)
    assert (await load(db, P, run_id)).status == "RESUMED"


async def test_the_cli_sends_a_signal(settings: Settings, db: Database, tmp_path: Path) -> None:
    run_id = await running(db)
    await wait(db, run_id)
    done = cli(settings, "runs", "signal", P, str(run_id), "paid", "--payload", '{"a": 2}',
               "--key", "k1", "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["delivered"] is True
    bad = cli(settings, "runs", "signal", P, str(run_id), "paid", "--payload", "{", "--key", "k2")
    assert bad.returncode == 1 and "E-INPUT-001" in bad.stderr
    assert (await load(db, P, run_id)).saga_steps["event:paid:1"]["result"] == {"a": 2}


async def test_the_replay_tool_rebuilds_runs_that_slept_and_waited(
    db: Database, database_url: str
) -> None:
    """Runs in every part of a durable wait (waiting, signalled, timed out, asleep, woken,
    cancelled while waiting): the run state folded from the log equals the live rows."""
    signalled, timed_out, waiting, cancelled = [await running(db) for _ in range(4)]
    for run_id in (signalled, timed_out, cancelled):
        await wait(db, run_id, time_out=timedelta(seconds=0.1))
    await wait(db, waiting, match={"a": 1})
    await send(db, signalled, {"a": 1}, "k1")
    await send(db, waiting, {"a": 2}, "k1")  # kept: no match
    await db.in_tenant(P, lambda c: control.cancel(c, cancelled, actor="ops", reason="stop"))
    await asyncio.sleep(0.15)
    [(resumed, _)] = await db.in_platform_writes(lambda c: timers.fire_due(c, 10))
    assert resumed.run_id == timed_out
    report = await replay(database_url, get("run_state"))
    assert report.differences == 0, report.lines()
    assert (await load(db, P, waiting)).status == "WAITING_EVENT"


async def test_the_producer_signals_inside_the_callers_transaction(
    db: Database, database_url: str
) -> None:
    """A producer login bound to P: the signal commits or rolls back with the caller's
    transaction, the timers loop delivers it; another project's run is not seen."""
    run_id = await running(db)
    await wait(db, run_id)
    [foreign] = await create_runs(db, "proj-other")
    async with bound_login(database_url, [P]) as login:
        conn = await login.connect()
        try:
            async with conn.transaction():
                await producer.set_tenant(conn, P)
                with pytest.raises(RunNotFoundError):
                    await producer.signal(conn, P, foreign, "paid", {}, key="k0")
                rolled = conn.transaction()
                await rolled.start()
                await producer.signal(conn, P, run_id, "paid", {"n": 0}, key="gone")
                await rolled.rollback()
                sent = await producer.signal(conn, P, run_id, "paid", {"n": 1}, key="k1")
                assert not sent.delivered and not sent.duplicate
            async with conn.transaction():
                await producer.set_tenant(conn, P)
                again = await producer.signal(conn, P, run_id, "paid", {"n": 1}, key="k1")
                assert again.duplicate and again.signal_id == sent.signal_id
        finally:
            await conn.close()
    assert await rows(db, "awooop_signals") == 1
    assert await db.in_platform_writes(lambda c: signals.deliver_pending(c, 10)) == (1, 1)
    state = await load(db, P, run_id)
    assert state.status == "RESUMED" and state.saga_steps["event:paid:1"]["result"] == {"n": 1}
