"""A rolling upgrade under load, and back: the previous release's fleet (from git history, in its
own virtual environment) is migrated and rolled process by process to this checkout's code,
then rolled back to the previous release's code on the schema this checkout left.

The previous release is the newest ``[[release]]`` of migrations/released.toml that is not
this commit (tests/support/releases.py builds and caches it). Its fleet (serve, relay, loops,
projector, two workers running the demo's handler) starts on a fresh database migrated by its
own ``awooop migrate``; API deliveries arrive at a steady rate through a client-side load
balancer (tests/support/fleet.py) while this checkout's ``awooop migrate`` runs and every
process is replaced one by one, each new process working beside the old one before the old
one stops gracefully. Runs that asked for approval on one side are approved with the other
side's route and command. Then every process goes back to the previous release the same
way, without its migrations (``awooop migrate`` of that release finds nothing to do).

Held after each direction: no ingest request failed (every 5xx and connection error counts);
every accepted delivery has exactly one run and every run completed exactly once, no step
journaled twice, the handler's side effect done once per run, no run held by two workers; the
approvals across the boundary completed; ``awooop replay --verify`` is clean for run state and
for the projector's read models; every replaced process exited 0.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from awooop.core.db import Database
from awooop.demo.processes import Processes
from tests.support import releases
from tests.support.fleet import Fleet, Load, Member, command, tickets
from tests.support.runs import all_histories, check_single_holder
from tests.support.services import private_postgres
from tests.support.waiting import eventually

PROJECT = "upgrade"
HEAD = "HEAD"
ROLES = ("serve", "relay", "loops", "projector", "worker-1", "worker-2")
# The order docs/operations.md (Upgrading) gives operators: loops first (the reaper decides
# dead letters and suspects), serve last, so runs the old serve accepts are dispatched and
# executed by the new release's processes for a while.
ROLL_ORDER = ("loops", "relay", "projector", "worker-1", "worker-2", "serve")
RATE = 20.0  # deliveries per second
APPROVALS = 4  # runs per direction that wait for an approval across the boundary
ACTOR = "upgrade-test"
ENV = {
    "AWOOOP_LLM_URL": "local:",
    "AWOOOP_SHUTDOWN_GRACE_S": "10",
    # Small pools: seven processes at the peak of a roll, on a 2-core machine.
    "AWOOOP_HTTP_DB_POOL_SIZE": "3",
    "AWOOOP_DB_POOL_SIZE": "2",
    "AWOOOP_WORKER_CONCURRENCY": "8",
    "AWOOOP_POINTER_CHECK_CONNECTIONS": "1",
    "AWOOOP_LOG_LEVEL": "info",  # the handler's side effect is its "acting" line
    "PYTHONPATH": "",  # each build imports its own tree
}
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED")
FLOOR = "SELECT oldest_release FROM awooop_schema_floor"
SCHEMA_ROWS = "SELECT name, checksum, applied_at FROM awooop_schema_migrations ORDER BY name"
CLAIMS_BY = (
    "SELECT count(*) FROM awooop_events WHERE event_type = 'RunClaimed' AND data->>'worker_id' = $1"
)
UNFINISHED = "SELECT count(*) FROM awooop_run_state WHERE status <> ALL($1::text[])"
RUNS = "SELECT run_id, status, result, failure_code, failure_reason FROM awooop_run_state"
DEDUPE = "SELECT provider_event_id, run_id FROM awooop_channel_event_dedupe"
COMPLETIONS = (
    "SELECT stream_id, count(*) AS n FROM awooop_events WHERE event_type = 'RunCompleted' "
    "GROUP BY stream_id"
)
STEPS = (
    "SELECT stream_id, data->>'step' AS step, count(*) AS n FROM awooop_events "
    "WHERE event_type = 'StepCompleted' GROUP BY 1, 2"
)
# The read models the projector keeps: equal to their rebuild from the log once it caught up.
PROJECTIONS = ("run_state_view", "run_timeline")
HANDLER_STEPS = {"parse", "summarise", "act"}  # and "approval:act" where it asked for one


class Clock:
    def __init__(self) -> None:
        self.start = self.last = time.monotonic()
        self.phases: dict[str, float] = {}

    def lap(self, phase: str) -> None:
        now = time.monotonic()
        self.phases[phase] = round(now - self.last, 1)
        self.last = now

    def report(self) -> str:
        total = time.monotonic() - self.start
        return f"{total:.1f} s: " + ", ".join(f"{k} {v}" for k, v in self.phases.items())


async def cli(build: Processes, *args: str) -> str:
    code, out, err = await build.run(*args)
    assert code == 0, f"awooop {' '.join(args)} ({build.cwd or 'HEAD'}): exit {code}\n{err[-3000:]}"
    return out


@asynccontextmanager
async def loaded(load: Load) -> AsyncIterator[None]:
    """Deliveries at the load's rate while the block runs."""
    stop = asyncio.Event()
    task = asyncio.create_task(load.run(stop))
    try:
        yield
    finally:
        stop.set()
        await task


@dataclass
class Upgrade:
    """The fleet, its load and what the test observes them with."""

    builds: dict[str, Processes]
    fleet: Fleet
    load: Load
    manage_token: str
    approvals_file: Path
    conn: Any  # an owner's connection to the fleet's database
    db: Database

    async def ask_approvals(self) -> list[str]:
        """Runs that wait for an approval, once each has asked for it."""
        body = {"text": "approve me", "approval": True}
        runs = [await self.load.submit(body) for _ in range(APPROVALS)]
        asked = [r for r in runs if r is not None]
        assert len(asked) == APPROVALS, self.load.failures
        await eventually(
            lambda: set(asked) <= set(tickets(self.approvals_file)),
            what="the approval runs to ask for approval",
            timeout_s=90,
        )
        return asked

    async def approve(self, build: str, runs: list[str]) -> None:
        """The first run with ``build``'s command line, the others with the HTTP route of the
        serve in rotation (``build``'s by then)."""
        found = tickets(self.approvals_file)
        first, *others = runs
        await cli(
            self.builds[build], "runs", "approve", PROJECT, first,
            "--token", found[first], "--actor", ACTOR,
        )  # fmt: skip
        for run_id in others:
            answer = await self.load.http.post(
                f"{self.fleet.rotation.pick()}/v1/projects/{PROJECT}/runs/{run_id}/approve",
                json={"token": found[run_id], "actor": ACTOR},
                headers={"Authorization": f"Bearer {self.manage_token}"},
            )
            assert answer.status_code == 200, answer.text

    async def roll_all(self, build: str) -> None:
        """Every process replaced by ``build``'s, one at a time, each new one doing work beside
        the old before the old one stops: a serve answers deliveries, a worker claims runs."""

        async def overlap(new: Member) -> bool:
            if new.url is not None:
                return self.fleet.rotation.answered[new.url] >= 5
            if command(new.role) == "worker":
                worker_id = new.worker_id()
                return worker_id is not None and await self.conn.fetchval(CLAIMS_BY, worker_id) > 0
            return True

        for role in ROLL_ORDER:
            await self.fleet.roll(role, build, overlap)

    async def more_runs(self, count: int) -> None:
        """Until ``count`` more deliveries than now were accepted."""
        target = len(self.load.accepted) + count
        await eventually(
            lambda: len(self.load.accepted) >= target,
            what=f"{count} more accepted runs",
            timeout_s=90,
        )

    async def check_runs(self, approved: list[str]) -> None:
        """Every accepted delivery's run completed exactly once, and nothing else ran."""
        conn, load = self.conn, self.load
        await eventually(
            lambda: conn.fetchval(UNFINISHED, list(TERMINAL)),
            equals=0,
            what="every accepted run to finish",
            timeout_s=180,
            interval_s=0.5,
        )
        assert load.failures == [], f"{len(load.failures)} failed requests: {load.failures[:20]}"
        accepted = set(load.accepted.values())
        runs = {str(r["run_id"]): r for r in await conn.fetch(RUNS)}
        assert set(runs) == accepted, (
            f"lost: {sorted(accepted - set(runs))[:10]}, "
            f"not accepted: {sorted(set(runs) - accepted)[:10]}"
        )
        unfinished = {
            k: (r["status"], r["failure_code"], r["failure_reason"])
            for k, r in runs.items()
            if r["status"] != "COMPLETED"
        }
        assert unfinished == {}, unfinished
        dedupe = {(r["provider_event_id"], str(r["run_id"])) for r in await conn.fetch(DEDUPE)}
        assert dedupe == set(load.accepted.items()), "one run per idempotency key"
        completions = {r["stream_id"]: r["n"] for r in await conn.fetch(COMPLETIONS)}
        assert completions == {f"run-{k}": 1 for k in runs}, "one RunCompleted per run"
        steps: dict[str, Counter[str]] = {k: Counter() for k in runs}
        for r in await conn.fetch(STEPS):
            steps[r["stream_id"].removeprefix("run-")][r["step"]] = r["n"]
        twice = {k: c for k, c in steps.items() if set(c.values()) != {1}}
        assert twice == {}, f"steps journaled twice: {twice}"
        missing = {k: set(c) for k, c in steps.items() if not HANDLER_STEPS.issubset(c)}
        assert missing == {}, f"runs without the handler's steps: {missing}"
        acted = Counter(e["run_id"] for e in self.fleet.worker_logs() if e.get("event") == "acting")
        assert {k: n for k, n in acted.items() if n != 1} == {}, "the side effect ran twice"
        assert set(acted) == accepted, f"no side effect for {sorted(accepted - set(acted))[:10]}"
        for history in (await all_histories(self.db)).values():
            check_single_holder(history)
        approved_by = {k: (runs[k]["status"], json.loads(runs[k]["result"])) for k in approved}
        assert all(
            status == "COMPLETED" and result["approved_by"] == ACTOR
            for status, result in approved_by.values()
        ), approved_by


async def replays_clean(build: Processes) -> None:
    """``replay --verify`` of run state, and of each projection once its projector has caught
    up with the log (a projector that fails on the schema never does)."""
    await cli(build, "replay", "run_state", "--verify")
    for projection in PROJECTIONS:
        last: list[str] = []

        async def verified(projection: str = projection, last: list[str] = last) -> bool:
            code, out, err = await build.run("replay", projection, "--verify")
            last[:] = [out[-1500:], err[-1500:]]
            return code == 0

        try:
            await eventually(verified, what=f"{projection} verified", timeout_s=90, interval_s=1)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {last}") from None


@pytest.mark.long(60)
@pytest.mark.upgrade
@pytest.mark.timeout(900)
async def test_fleet_rolls_to_this_release_under_load_and_back(
    redis_server_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    clock = Clock()
    old = await asyncio.to_thread(releases.previous_release)
    clock.lap("install")
    approvals_file = tmp_path / "approvals.jsonl"
    print(f"process logs: {tmp_path / 'logs'}")
    # A private Postgres server: seven processes at the peak of a roll, and their connections
    # must not compete with the rest of the suite's (a refused connection is a 503 here).
    with private_postgres() as pg:
        clock.lap("postgres")
        url = pg.url.rsplit("/", 1)[0] + "/upgrade"  # created by the old `awooop migrate`
        env = {
            **ENV,
            "AWOOOP_DATABASE_URL": url,
            "AWOOOP_REDIS_URL": redis_server_url,
            "AWOOOP_REDIS_KEY_PREFIX": redis_prefix,
            "AWOOOP_EXAMPLE_APPROVALS": str(approvals_file),
        }
        builds = {
            old.short: Processes(env, tmp_path / "logs", python=str(old.python), cwd=old.source),
            HEAD: Processes(env, tmp_path / "logs", cwd=releases.ROOT),  # this checkout
        }
        fleet = Fleet(builds)
        await cli(builds[old.short], "migrate")  # the previous release's own migrations
        api = await cli(builds[old.short], "tokens", "create", PROJECT, "--channel", "api")
        manage = await cli(builds[old.short], "tokens", "create", PROJECT, "--scope", "manage")
        load = Load(fleet.rotation, PROJECT, api.strip(), RATE)
        conn = await asyncpg.connect(url)
        db = await Database.open(url, max_size=2)
        up = Upgrade(builds, fleet, load, manage.strip(), approvals_file, conn, db)
        try:
            await fleet.up(ROLES, old.short)
            clock.lap(f"{old.short} fleet up")
            async with loaded(load):
                await up.more_runs(40)
                asked_on_old = await up.ask_approvals()
                clock.lap(f"load on {old.short}")
                migrated = await cli(builds[HEAD], "migrate")
                floor = await conn.fetchval(FLOOR)
                assert floor <= old.newest_migration, (
                    f"this release's migrations raise the schema floor to {floor}, above "
                    f"release {old.short} ({old.newest_migration}): its processes may not run "
                    "on the new schema, so there is no rolling upgrade from it and no way back"
                )
                clock.lap("HEAD migrate")
                await up.roll_all(HEAD)
                clock.lap("roll to HEAD")
                await up.approve(HEAD, asked_on_old)
                await up.more_runs(40)
            await up.check_runs(asked_on_old)
            await replays_clean(builds[HEAD])
            clock.lap("HEAD checks")

            schema = await conn.fetch(SCHEMA_ROWS)
            async with loaded(load):
                asked_on_head = await up.ask_approvals()
                await cli(builds[old.short], "migrate")
                assert await conn.fetch(SCHEMA_ROWS) == schema, "the old migrate changed nothing"
                await up.roll_all(old.short)
                clock.lap(f"roll back to {old.short}")
                await up.approve(old.short, asked_on_head)
                await up.more_runs(40)
            await up.check_runs([*asked_on_old, *asked_on_head])
            await replays_clean(builds[old.short])
            clock.lap(f"{old.short} checks")
        finally:
            await fleet.stop_all()
            await load.close()
            await db.close()
            await conn.close()
    assert {k: v for k, v in fleet.exit_codes.items() if v != 0} == {}
    print(
        f"release {old.short} -> HEAD -> {old.short}: {len(load.accepted)} runs accepted "
        f"({len(load.accepted) / load.seconds:.1f}/s over {load.seconds:.0f} s of load), "
        f"{dict(load.statuses)}, by serve {dict(load.rotation.answered)}; "
        f"HEAD migrate: {migrated.strip()}; errors logged: {fleet.errors()[:10]}; {clock.report()}"
    )
