"""A frozen relay with two workers up, on the Redis this machine runs (7.0: XINFO CONSUMERS'
idle time is not reset by a read that returns nothing, so idle workers look gone): doctor names
the relay (its heartbeat row: host and pid), and no check tells the operator to start workers
that are running. Once the relay thaws, the waiting run completes."""

from __future__ import annotations

import signal
import socket
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from awooop.commands.doctor_flow import blocked as blocked_check
from awooop.commands.doctor_flow import loops as loops_check
from awooop.commands.doctor_results import FAIL, Check
from awooop.core.config import Settings
from awooop.runs import blocked_facts
from awooop.runs.blocked import Reason
from awooop.services import Services
from tests.support.runs import create_runs
from tests.support.waiting import eventually
from tests.support.workers import relay_process, workers

pytestmark = pytest.mark.fast("processes")


@pytest.fixture
async def quiet(fast: Settings) -> AsyncIterator[Services]:
    """Services whose blocked_on window is the 2 s lease, with no polling path (60 s): a run
    waits for the relay to announce it."""
    settings = msgspec.structs.replace(fast, poll_interval_s=60.0)
    opened = await Services.open(settings, db_pool_size=4)
    yield opened
    await opened.close()


async def status_of(services: Services, project: str, run_id: uuid.UUID) -> str:
    async def read(conn: object) -> str:
        return str(
            await conn.fetchval(  # type: ignore[attr-defined]
                "SELECT status FROM awooop_run_state WHERE run_id = $1", run_id
            )
        )

    return await services.db.in_tenant(project, read)


@pytest.mark.connections(32)
async def test_doctor_names_the_frozen_relay_and_not_the_running_workers(
    quiet: Services, tmp_path: Path
) -> None:
    settings = quiet.settings
    project = f"frozen-{uuid.uuid4().hex[:6]}"
    relay = relay_process(settings, tmp_path).start()
    try:
        with workers(settings, tmp_path, 2, relay=False):

            async def two_workers() -> bool:
                async with quiet.db.platform() as conn:
                    return bool(await conn.fetchval("SELECT awooop_live_workers() = 2"))

            await eventually(two_workers, what="two live workers", timeout_s=90)
            [first] = await create_runs(quiet.db, project)

            async def first_done() -> bool:
                return await status_of(quiet, project, first) == "COMPLETED"

            await eventually(first_done, what="the first run to complete", timeout_s=90)

            relay.signal(signal.SIGSTOP)
            [waiting] = await create_runs(quiet.db, project)

            async def relay_stale() -> list[Check]:
                return [c for c in await loops_check(quiet) if c.name == "loop relay/__platform__"]

            async def named() -> bool:
                return bool(await relay_stale())

            await eventually(named, what="doctor to find the relay stale", timeout_s=90)
            [line] = await relay_stale()
            assert line.status == FAIL
            assert f"pid {relay.pid}" in line.detail and socket.gethostname() in line.detail
            assert line.detail.startswith("stopped: no heartbeat"), line.detail

            [runs_line] = await blocked_check(quiet)
            assert "start `awooop worker`" not in runs_line.fix, runs_line
            async with quiet.db.platform() as conn:
                decided = await blocked_facts.blocked_on(
                    conn, quiet.redis, quiet.keys, [waiting], settings.lease_ttl_s
                )
            verdict = decided[waiting]
            assert verdict is not None and verdict.reason is Reason.PENDING_WORKERS_BUSY, verdict

            relay.signal(signal.SIGCONT)

            async def waiting_done() -> bool:
                return await status_of(quiet, project, waiting) == "COMPLETED"

            await eventually(
                waiting_done,
                what="the waiting run to complete after the relay thawed",
                timeout_s=90,
            )
    finally:
        relay.signal(signal.SIGCONT)
        relay.stop()
