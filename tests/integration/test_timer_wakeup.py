"""The timers loop's wake-up (awooop.loops.timers.TimerWakeup) on a real listening connection:
an iteration delivers signals and cancels children only when rung for it (or in a full pass:
the first iteration, one a poll interval after the last full one, every one while nobody
listens), a failed pass is made again, and the wake armed after an iteration keeps a new wait
notified during it that is due sooner than the iteration's own look ahead. The look ahead is
read in the fire transaction (``fire_and_look_ahead``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import asyncpg
import msgspec
import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.loops import LoopContext
from awooop.loops import timers as timers_loop
from awooop.loops.timers import CHANNEL, TimerWakeup
from awooop.services import Services
from tests.integration.test_fair_timers import sleepers

P = "proj-timer-wakeup"


async def ring(database_url: str, payload: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("SELECT pg_notify($1, $2)", CHANNEL, payload)
    finally:
        await conn.close()


async def until(check: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "not within the timeout"
        await asyncio.sleep(0.02)


async def test_signal_and_child_passes_run_when_rung_and_in_full_passes(database_url: str) -> None:
    ctx = LoopContext(project_id="__platform__")
    wake = TimerWakeup(ctx, database_url, full_pass_s=3600.0)
    assert wake.begin() == (True, True)  # nobody listens yet: every pass
    await wake.listen()
    try:
        assert wake.begin() == (True, True)  # the first listening iteration is a full pass
        assert wake.begin() == (False, False)  # nothing rang
        await ring(database_url, timers_loop.SIGNAL_PAYLOAD)
        await until(ctx.wakeup.is_set)
        assert wake.begin() == (True, False)
        ctx.wakeup.clear()
        await ring(database_url, timers_loop.CHILDREN_PAYLOAD)
        await until(ctx.wakeup.is_set)
        assert wake.begin() == (False, True)
        wake.again(True, False)  # that iteration failed, or left signals: the next one again
        assert wake.begin() == (True, False)
        assert wake.begin() == (False, False)
    finally:
        await wake.close()
    often = TimerWakeup(ctx, database_url, full_pass_s=0.0)  # a poll interval always passed
    await often.listen()
    try:
        assert often.begin() == (True, True)
        assert often.begin() == (True, True)
    finally:
        await often.close()


async def test_a_wait_notified_during_an_iteration_keeps_its_sooner_wake(
    database_url: str,
) -> None:
    ctx = LoopContext(project_id="__platform__")
    wake = TimerWakeup(ctx, database_url, full_pass_s=3600.0)
    await wake.listen()
    try:
        wake.begin()
        await ring(database_url, "0.3")  # a new wait, due in 0.3 s, written mid-iteration
        await until(lambda: wake.armed_in() is not None)
        wake.settle(600.0)  # the iteration's look ahead had not seen it
        armed = wake.armed_in()
        assert armed is not None and armed < 1.0
        await until(ctx.wakeup.is_set)
        ctx.wakeup.clear()
        wake.begin()  # a new iteration forgets it
        wake.settle(600.0)
        armed = wake.armed_in()
        assert armed is not None and armed > 500.0
    finally:
        await wake.close()


async def test_the_fire_transaction_reads_when_the_next_wait_is_due(db: Database) -> None:
    now = datetime.now(UTC)
    await sleepers(db, P, 3, now - timedelta(seconds=1))
    await sleepers(db, P, 2, now + timedelta(hours=1))
    fired, more, due_in = await timers_loop.fire_and_look_ahead(db, 10)
    assert (fired, more) == (3, False)
    assert due_in is not None and 3500 < due_in <= 3600  # the waits it fired are gone
    fired, more, due_in = await timers_loop.fire_and_look_ahead(db, 1)
    assert (fired, more) == (0, False)
    assert due_in is not None and due_in > 3500
    await sleepers(db, P, 2, now - timedelta(seconds=1))
    fired, more, due_in = await timers_loop.fire_and_look_ahead(db, 1)  # batches of one
    assert (fired, more) == (2, False)
    assert due_in is not None and due_in > 3500
    await sleepers(db, P, 25, now - timedelta(seconds=1))
    fired, more, due_in = await timers_loop.fire_and_look_ahead(db, 1)  # the bound: 20 batches
    assert (fired, more, due_in) == (timers_loop.MAX_BATCHES, True, None)


@pytest.mark.long(20)
async def test_while_timers_keep_firing_the_next_fire_waits_the_coalescing_period(
    settings: Settings,
) -> None:
    coalesce = 10.0  # long enough to tell apart on a loaded machine
    services = await Services.open(msgspec.structs.replace(settings, timer_coalesce_s=coalesce))
    [spec] = timers_loop.loops(services)
    ctx = LoopContext(project_id="__platform__")
    try:
        now = datetime.now(UTC)
        await sleepers(services.db, P, 2, now - timedelta(seconds=1))
        await sleepers(services.db, P, 2, now + timedelta(seconds=0.5))  # due meanwhile
        await spec.body(ctx)  # fires the first two
        async with services.db.platform() as conn:
            assert await conn.fetchval("SELECT count(*) FROM awooop_run_waits") == 2
        assert not ctx.wakeup.is_set()
        await asyncio.sleep(1.0)  # the next two are due now, yet no wake before the period
        assert not ctx.wakeup.is_set()
        await until(ctx.wakeup.is_set, timeout_s=60.0)  # then it fires them together
        ctx.wakeup.clear()
        await spec.body(ctx)
        async with services.db.platform() as conn:
            assert await conn.fetchval("SELECT count(*) FROM awooop_run_waits") == 0
    finally:
        if spec.close is not None:
            await spec.close()
        await services.close()


async def test_an_iteration_that_fired_nothing_holds_the_next_wake_to_the_period_only(
    settings: Settings,
) -> None:
    """While workers fire their own sleeps the loop finds nothing due, and it looks again no
    sooner than the period after the last look (not once per wait); a wait due after the
    period wakes it at its due time, not later."""
    coalesce = 2.0
    services = await Services.open(msgspec.structs.replace(settings, timer_coalesce_s=coalesce))
    [spec] = timers_loop.loops(services)
    ctx = LoopContext(project_id="__platform__")
    try:
        await sleepers(services.db, P, 1, datetime.now(UTC) + timedelta(seconds=0.3))
        started = time.monotonic()
        await spec.body(ctx)  # nothing due yet
        await asyncio.sleep(1.0)  # the wait is due (and past its grace), within the period
        assert not ctx.wakeup.is_set()
        await until(ctx.wakeup.is_set, timeout_s=30.0)
        assert time.monotonic() - started >= coalesce * 0.9
        ctx.wakeup.clear()
        await spec.body(ctx)  # fires it
        due_in = coalesce * 2
        await sleepers(services.db, P, 1, datetime.now(UTC) + timedelta(seconds=due_in))
        started = time.monotonic()
        ctx.wakeup.clear()
        await spec.body(ctx)  # nothing due: the next look is at the wait's due time + grace
        await until(ctx.wakeup.is_set, timeout_s=30.0)
        woke = time.monotonic() - started
        assert due_in - 0.1 <= woke <= due_in + settings.timer_grace_s + 1.0, woke
    finally:
        if spec.close is not None:
            await spec.close()
        await services.close()
