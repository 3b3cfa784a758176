"""A concurrency key under chaos: a key with a limit of 2, real ``awooop worker`` processes
(3, concurrency 4 each) of which the test SIGKILLs one that holds a run of the key every few
seconds (and starts a replacement), with approvals and tool waits in the mix.

Checked from the handlers' own side-effect records (``begin``/``end`` with timestamps; an
attempt killed mid-run ends at the moment of its kill): never 3 attempts of the key executing
at once, and 2 at some point (the limit is used, not serialised to 1). Checked from Postgres
every 0.1 s: never more than 2 of the key's runs holding a live lease, and a dead attempt's
slot (its lease) never outlives its kill by more than the lease TTL. At the end every run is
COMPLETED: no slot leaked and wedged the key. A run waiting for approval holds no slot (its
attempt ended), nor does a run waiting for its tool (its attempt keeps its lease, but only a
RUNNING run holds a slot): it goes on only once re-admitted under its key, and a kill while
it waits for its tool or for a slot leaves nothing held. About 60 s."""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import msgspec
import pytest

from awooop import producer
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import AwoooPError
from awooop.eventlog import queries
from awooop.runs import approvals, concurrency
from awooop.runs.approvals import Decision
from awooop.runs.pause_rules import Scope
from tests.support.handlers import SIDE_EFFECTS_ENV, executions, max_overlap, read_effects
from tests.support.workers import WorkerProcess

P = "proj-keys"
KEY = "channel:api/cust-a"
HANDLER = "tests.support.handlers:keyed"
LIMIT = 2
KILLS = 6
CLOCK_SLACK_S = 0.3
# A shared, busy database refuses a connection now and then: the test's own watchers retry.
TRANSIENT = (
    AwoooPError,
    asyncpg.PostgresError,
    OSError,
)  # the kill is timed in this process, the lease by Postgres: one machine

pytestmark = pytest.mark.fast("poison")
# A run's lease as the rule sees it: its own, or its worker's session's if that ends first.
LEASE = queries.fragment("run_lease_until")


def test_max_overlap() -> None:
    assert max_overlap([(0, 1), (1, 2), (2, 3)]) == 1
    assert max_overlap([(0, 2), (1, 3), (1.5, 1.6)]) == 3
    assert max_overlap([]) == 0


@pytest.mark.long(35)
@pytest.mark.connections(38)
async def test_a_key_limited_to_2_never_runs_3_while_workers_are_killed(
    db: Database, fast: Settings, tmp_path: Path
) -> None:
    # Kills aimed at the key's holders also hit suspects running alone: 20 attempts, as in
    # the chaos soak, so that no run is failed as a poison for deaths the test caused.
    fast = msgspec.structs.replace(fast, max_attempts=20)
    rng = random.Random(34)
    effects_path = str(tmp_path / "effects.jsonl")
    env = {SIDE_EFFECTS_ENV: effects_path}
    await db.in_tenant(
        P,
        lambda c: concurrency.set_limit(
            c,
            P,
            Scope.CHANNEL,
            "api",
            key_expr="input.customer",
            max_expr=str(LIMIT),
            global_max=None,
            depth_cap=None,
            actor="test",
        ),
    )
    loops = WorkerProcess(
        fast, tmp_path, "loops", command=("loops", "run", "relay", "run-reaper")
    ).start()
    procs: dict[str, WorkerProcess] = {}  # worker id -> process
    killed_at: dict[int, float] = {}  # pid -> when
    killed_ids: dict[str, float] = {}  # worker id -> when

    def start_worker() -> None:
        proc = WorkerProcess(
            fast,
            tmp_path,
            f"w{len(procs) + len(killed_ids)}",
            handler=HANDLER,
            args=("--concurrency", "4"),
            env=env,
        ).start()
        procs[proc.worker_id()] = proc

    key_runs: list[uuid.UUID] = []
    other_runs: list[uuid.UUID] = []
    samples: list[int] = []  # the key's runs holding a slot (a live lease), every 0.1 s
    approving: list[int] = []  # the key's runs waiting for an approval, at the same moments
    tooling: list[int] = []  # and for their tools (or for a slot after them)
    dead_slots: list[tuple[str, float, float]] = []  # worker, killed at, lease_until
    done = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    try:
        for _ in range(3):
            start_worker()
        for i in range(36):
            body: dict[str, Any] = {"customer": "cust-a", "sleep": rng.uniform(0.3, 0.7)}
            body["tool"] = i % 3 == 1
            body["approval"] = i % 4 == 2
            event = producer.ChannelEvent("api", f"a-{i}", body)
            key_runs.append((await producer.submit(db, P, event, settings=fast)).run_id)
        for i in range(8):
            event = producer.ChannelEvent("api", f"b-{i}", {"customer": "cust-b", "sleep": 0.3})
            other_runs.append((await producer.submit(db, P, event, settings=fast)).run_id)
        everyone = key_runs + other_runs

        async def approver() -> None:
            while not done.is_set():
                await asyncio.sleep(0.3)
                waiting: list[Any] = []
                with contextlib.suppress(*TRANSIENT):  # a busy database: look again
                    waiting = await db.in_platform(
                        lambda c: c.fetch(
                            "SELECT r.run_id FROM awooop_run_state r JOIN awooop_approvals a"
                            " USING (run_id) WHERE r.status = 'WAITING_APPROVAL'"
                            " AND a.used_at IS NULL"
                        )
                    )
                for row in waiting:
                    run_id = row["run_id"]
                    with contextlib.suppress(*TRANSIENT):  # decided meanwhile, or busy: again
                        await db.in_tenant(
                            P,
                            lambda c, r=run_id: approvals.decide_as(
                                c, r, Decision.APPROVED, actor="test", by="Soak"
                            ),
                        )

        async def sampler() -> None:
            while not done.is_set():
                await asyncio.sleep(0.1)
                try:
                    rows = await db.in_platform(
                        lambda c: c.fetch(
                            f"SELECT worker_id, status, extract(epoch FROM {LEASE}) AS until,"
                            f" {LEASE} > now() AS live FROM awooop_run_state AS r"
                            " WHERE concurrency_key = $1"
                            " AND status IN ('RUNNING', 'WAITING_TOOL', 'WAITING_APPROVAL')",
                            KEY,
                        )
                    )
                except TRANSIENT:
                    continue  # a sample missed on a busy database
                holding = [r for r in rows if r["status"] == "RUNNING" and r["live"]]
                samples.append(len(holding))
                approving.append(sum(1 for r in rows if r["status"] == "WAITING_APPROVAL"))
                tooling.append(sum(1 for r in rows if r["status"] == "WAITING_TOOL"))
                for r in holding:
                    if r["worker_id"] in killed_ids:
                        dead_slots.append((r["worker_id"], killed_ids[r["worker_id"]], r["until"]))

        async def holders(statuses: list[str]) -> list[str]:
            rows: list[Any] = []
            with contextlib.suppress(*TRANSIENT):
                rows = await db.in_platform(
                    lambda c: c.fetch(
                        "SELECT DISTINCT worker_id FROM awooop_run_state AS r"
                        " WHERE concurrency_key = $1 AND status = ANY($2::text[])"
                        f" AND {LEASE} > now()",
                        KEY,
                        statuses,
                    )
                )
            return [r["worker_id"] for r in rows if r["worker_id"] in procs]

        async def killer() -> None:
            for kill in range(KILLS):
                await asyncio.sleep(rng.uniform(2.0, 4.0))
                # Every other kill waits (a while) for a worker executing an attempt of the
                # key, so that kills do cut attempts mid-run however the machine's load moves
                # the runs; the others hit its holders as they are, tool waits included, then
                # a worker at random.
                ids = await holders(["RUNNING", "WAITING_TOOL"])
                aim_by = time.monotonic() + (5.0 if kill % 2 == 0 else 0.0)
                while kill % 2 == 0 and time.monotonic() < aim_by:
                    if running := await holders(["RUNNING"]):
                        ids = running
                        break
                    await asyncio.sleep(0.05)
                victim_id = rng.choice(ids) if ids else rng.choice(sorted(procs))
                victim = procs.pop(victim_id)
                victim.signal(signal.SIGKILL)
                killed_at[victim.pid] = killed_ids[victim_id] = time.time()
                victim.wait()
                start_worker()

        tasks += [asyncio.create_task(t()) for t in (approver, sampler)]
        await killer()
        deadline = time.monotonic() + 120
        while True:
            statuses: list[Any] = []
            with contextlib.suppress(*TRANSIENT):
                statuses = await db.in_platform(
                    lambda c: c.fetch(
                        "SELECT status, count(*) AS n FROM awooop_run_state"
                        " WHERE run_id = ANY($1::uuid[]) GROUP BY status",
                        everyone,
                    )
                )
            for task in tasks:
                if task.done():
                    task.result()  # a watcher that died says why here
            counts = {r["status"]: r["n"] for r in statuses}
            if counts == {"COMPLETED": len(everyone)}:
                break
            if time.monotonic() >= deadline:
                stuck = await db.in_platform(
                    lambda c: c.fetch(
                        "SELECT r.run_id, r.status, r.attempt_count, a.used_at, a.decision"
                        " FROM awooop_run_state r LEFT JOIN awooop_approvals a USING (run_id)"
                        " WHERE r.run_id = ANY($1::uuid[]) AND r.status <> 'COMPLETED'",
                        everyone,
                    )
                )
                raise AssertionError(f"not all COMPLETED in 120 s: {counts} {stuck}")
            await asyncio.sleep(0.3)
        done.set()
        await asyncio.gather(*tasks)
    finally:
        done.set()
        for task in tasks:
            task.cancel()
        for proc in [*procs.values(), loops]:
            proc.stop()

    effects = read_effects(effects_path)
    print(  # what the soak went through, for the log
        {"kills": len(killed_at), "samples": len(samples), "dead_slot_samples": len(dead_slots)}
    )
    stretches = executions(effects, {str(r) for r in key_runs}, killed_at, time.time())
    cut = [s for s in stretches if s[1] in killed_at.values()]
    print({"stretches": len(stretches), "cut_by_kills": len(cut)})
    assert max_overlap(stretches) == LIMIT, stretches
    assert max(samples) <= LIMIT and LIMIT in samples
    # runs waiting for an approval or a tool hold no slot: both slots were in use beside them
    assert any(n == LIMIT and a > 0 for n, a in zip(samples, approving, strict=True))
    assert any(n == LIMIT and w > 0 for n, w in zip(samples, tooling, strict=True))
    assert len(killed_at) == KILLS
    assert cut, "no kill caught an attempt of the key mid-run"
    ttl = fast.lease_ttl_s
    assert all(until <= killed + ttl + CLOCK_SLACK_S for _, killed, until in dead_slots), dead_slots
    # approvals and tool waits were in the mix, and the other key was not held back by this one
    assert sum(1 for e in effects if e["what"] == "begin") > len(key_runs) + len(other_runs)
