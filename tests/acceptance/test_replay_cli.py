"""``awooop replay`` as a process: exit codes, the report, repair by swap (R-32)."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from tests.support.projection_workload import Workload


def env_for(settings: Settings) -> dict[str, str]:
    return {
        **os.environ,
        "AWOOOP_DATABASE_URL": settings.database_url,
        "AWOOOP_REDIS_URL": settings.redis_url,
        "AWOOOP_REDIS_KEY_PREFIX": settings.redis_key_prefix,
        "AWOOOP_LOG_LEVEL": "info",
    }


async def awooop(settings: Settings, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "awooop.cli",
        *args,
        env=env_for(settings),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.mark.connections(10)
async def test_verify_names_a_corrupted_run_and_swap_repairs_it(
    settings: Settings, db: Database
) -> None:
    work = Workload(db, seed=31)
    await work.run(walkers=2, runs_each=6, max_steps=8)
    code, out, err = await awooop(settings, "replay", "run_state")
    assert code == 0, out + err
    assert "verify: no difference" in out
    assert '"event": "replay_phase_done"' in err  # not a terminal: plain log lines

    (_, victim), *_ = work.run_ids
    async with db.platform_writes() as conn:
        await conn.execute(
            "UPDATE awooop_run_state SET version = version + 100, failure_reason = 'forged' "
            "WHERE run_id = $1",
            victim,
        )
    code, out, _ = await awooop(settings, "replay", "run_state", "--verify")
    assert code == 1
    assert f"different run_id={victim} (version, failure_reason)" in out
    assert "awooop_run_state: 0 missing, 0 extra, 1 different" in out

    code, out, err = await awooop(settings, "replay", "run_state", "--swap")
    assert code == 0, out + err
    assert "swap: done" in out
    code, out, _ = await awooop(settings, "replay", "run_state", "--verify")
    assert code == 0 and "verify: no difference" in out


@pytest.mark.connections(10)
async def test_a_project_is_repaired_in_place_and_others_are_left_alone(
    settings: Settings, db: Database
) -> None:
    work = Workload(db, seed=32, projects=("alpha", "beta"))
    await work.run(walkers=2, runs_each=6, max_steps=6)
    alpha = next(r for p, r in work.run_ids if p == "alpha")
    beta = next(r for p, r in work.run_ids if p == "beta")
    async with db.platform_writes() as conn:
        await conn.execute(
            "UPDATE awooop_run_state SET attempt_count = 42 WHERE run_id = ANY($1::uuid[])",
            [alpha, beta],
        )
    code, out, _ = await awooop(settings, "replay", "run_state", "--project", "alpha", "--swap")
    assert code == 0, out
    assert "repair: 1 row(s) of project alpha rewritten" in out
    code, out, _ = await awooop(settings, "replay", "run_state")
    assert code == 1
    assert f"different run_id={beta} (attempt_count)" in out and str(alpha) not in out


async def test_bad_input_is_refused_with_an_error_code(settings: Settings) -> None:
    code, _, err = await awooop(settings, "replay", "no_such_projection")
    assert code == 1 and err.startswith("error E-PROJECTION-001: unknown projection")
