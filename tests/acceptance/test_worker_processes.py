"""Worker processes (the real CLI) on real Postgres: exactly-once completion with 10 workers,
kill -9 recovery without repeating journaled steps, the fence against a stalled worker, SIGTERM,
and approvals through the CLI (R-11 to R-17)."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter, defaultdict
from pathlib import Path

import asyncpg
import httpx
import msgspec
import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.events import run_stream_id
from awooop.core.migrate import migrate
from awooop.demo.servers import free_port
from tests.support.connections import fit_workers
from tests.support.handlers import read_effects
from tests.support.runs import (
    all_finished,
    all_histories,
    check_single_holder,
    count_events,
    create_runs,
    events_of,
    load,
)
from tests.support.services import private_postgres
from tests.support.waiting import eventually
from tests.support.workers import WorkerProcess, cli, relay_process, workers

P = "proj-acc"
NOOP = "awooop.examples.handlers:noop"


pytestmark = pytest.mark.fast("processes")


@pytest.fixture
def effects_file(tmp_path: Path) -> str:
    return str(tmp_path / "effects.jsonl")


@pytest.mark.parametrize(
    ("mode", "runs", "processes"),
    [
        # pools of one connection a role for the ten (5 each) and a relay
        pytest.param("streams", 1000, 10, marks=pytest.mark.connections(56)),
        pytest.param("polling", 300, 4, marks=pytest.mark.connections(36)),
    ],
)
@pytest.mark.long(14)
@pytest.mark.connections(70)
async def test_runs_on_many_worker_processes_each_complete_once(
    db: Database,
    fast: Settings,
    tmp_path: Path,
    effects_file: str,
    mode: str,
    runs: int,
    processes: int,
    pg_connections: int,
) -> None:
    """1,000 runs on 10 worker processes (stream path with a relay); and the polling path alone
    (no relay, as when Redis lost the messages). Eleven processes share two cores here, so the
    lease is longer than in the other tests (a starved event loop must not lose leases)."""
    crowded = fit_workers(
        msgspec.structs.replace(fast, lease_ttl_s=8.0, heartbeat_interval_s=1.0),
        processes,
        concurrency=8,
        granted=pg_connections,
        others=1 if mode == "streams" else 0,  # the relay's connection
    )
    with workers(
        crowded,
        tmp_path,
        processes,
        relay=mode == "streams",
        handler="tests.support.handlers:exclusive",
        args=("--concurrency", "8", *(("--no-streams",) if mode == "polling" else ())),
        env={"AWOOOP_TEST_SIDE_EFFECTS": effects_file, "AWOOOP_LOG_LEVEL": "warning"},
    ) as procs:
        # Every worker takes work before the first run exists: on a loaded machine a process
        # takes seconds to start, and the first three up finished all 1,000 runs before the
        # others printed their start.
        ids = [p.worker_id() for p in procs]
        run_ids = await create_runs(db, P, runs, payload={"sleep": 0.005})
        await eventually(
            lambda: all_finished(db, run_ids), timeout_s=120, what=f"{runs} runs finished"
        )
    async with db.platform() as conn:
        outcomes = await conn.fetch(
            "SELECT status, failure_code, failure_reason, count(*) AS n FROM awooop_run_state "
            "GROUP BY 1, 2, 3"
        )
    assert [(r["status"], r["n"]) for r in outcomes] == [("COMPLETED", runs)], [
        dict(r.items()) for r in outcomes
    ]
    completed = await count_events(db, "RunCompleted")
    claimed = await count_events(db, "RunClaimed")
    assert sorted(completed[run_stream_id(r)] for r in run_ids) == [1] * runs
    assert sorted(claimed[run_stream_id(r)] for r in run_ids) == [1] * runs
    lines = read_effects(effects_file)
    begins = Counter(e["run_id"] for e in lines if e["what"] == "begin")
    assert sorted(begins[str(r)] for r in run_ids) == [1] * runs  # each handler ran once
    by_worker = Counter(e["worker_id"] for e in lines if e["what"] == "end")
    assert set(by_worker) <= set(ids) and len(by_worker) >= processes // 2  # work was shared
    histories = await all_histories(db)
    assert len(histories) == runs
    for history in histories.values():
        check_single_holder(history)


@pytest.mark.connections(25)
async def test_kill_9_mid_run_recovers_without_repeating_journaled_steps(
    db: Database, fast: Settings, tmp_path: Path, effects_file: str
) -> None:
    with workers(
        fast,
        tmp_path,
        2,
        args=("--concurrency", "4"),
        env={"AWOOOP_TEST_SIDE_EFFECTS": effects_file},
    ) as procs:
        for proc in procs:
            proc.worker_id()
        [run_id] = await create_runs(db, P, payload={"hang_on_attempts": [1]})

        async def hanging() -> bool:
            return any(e["what"] == "hang" for e in read_effects(effects_file))

        await eventually(hanging, timeout_s=30, what="attempt 1 reached its hang")
        [hang] = [e for e in read_effects(effects_file) if e["what"] == "hang"]
        victim = next(p for p in procs if p.pid == hang["pid"])
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        killed_at = time.monotonic()
        await eventually(lambda: all_finished(db, [run_id]), timeout_s=30, what="recovery")
        recovery_s = time.monotonic() - killed_at
    state = await load(db, P, run_id)
    assert state.status == "COMPLETED" and state.attempt_count == 2
    assert recovery_s <= fast.lease_ttl_s + fast.reclaim_interval_s + 1.5
    lines = [e for e in read_effects(effects_file) if e["run_id"] == str(run_id)]
    assert [e["what"] for e in lines if e["what"] == "one"] == ["one"]  # not repeated
    assert [(e["what"], e["attempt"]) for e in lines if e["what"] != "one"] == [
        ("hang", 1),
        ("two", 2),
        ("done", 2),
    ]
    assert (await count_events(db, "RunCompleted"))[run_stream_id(run_id)] == 1
    check_single_holder(await events_of(db, P, run_id))


@pytest.mark.connections(32)
async def test_a_stalled_worker_is_fenced_off_from_completing(
    db: Database, fast: Settings, tmp_path: Path, effects_file: str
) -> None:
    env = {"AWOOOP_TEST_SIDE_EFFECTS": effects_file}
    relay = relay_process(fast, tmp_path).start()
    stalled = WorkerProcess(fast, tmp_path, "stalled", env=env).start()
    other: WorkerProcess | None = None
    try:
        stalled_id = stalled.worker_id()
        payload = {"block_on_attempts": [1], "block_s": 5.0}
        [run_id] = await create_runs(db, P, payload=payload)

        async def blocked() -> bool:
            return any(e["what"] == "block" for e in read_effects(effects_file))

        await eventually(blocked, timeout_s=30, what="attempt 1 stalled")
        other = WorkerProcess(fast, tmp_path, "other", env=env).start()
        other_id = other.worker_id()
        await eventually(
            lambda: all_finished(db, [run_id]), timeout_s=30, what="the other worker completed"
        )

        async def unblocked() -> bool:
            return any(e["what"] == "unblocked" for e in read_effects(effects_file))

        await eventually(unblocked, timeout_s=30, what="the stalled worker woke up")
        await eventually(
            lambda: _logged(stalled, "last_write_fenced"),
            timeout_s=10,
            what="the stalled completion refused",
        )
    finally:
        stalled.stop()
        if other is not None:
            other.stop()
        relay.stop()
    history = await events_of(db, P, run_id)
    completions = [e for e in history if type(e).__name__ == "RunCompleted"]
    assert len(completions) == 1
    assert (completions[0].worker_id, completions[0].attempt) == (other_id, 2)
    assert stalled_id != other_id
    # After its step the stalled worker wrote nothing; the requeue (written by the reaper or
    # the other worker) only names the stalled worker's expired lease.
    requeues = [e for e in history[3:] if type(e).__name__ == "RunRequeued"]
    assert [(e.worker_id, e.attempt) for e in requeues] == [(stalled_id, 1)]
    assert all(
        getattr(e, "worker_id", None) != stalled_id for e in history[3:] if e not in requeues
    )
    [refused] = [e for e in stalled.log_events() if e.get("event") == "last_write_fenced"]
    assert refused["outcome"] == "completed" and refused["reason"].startswith("write refused")
    check_single_holder(history)


async def _logged(proc: WorkerProcess, event: str) -> bool:
    return any(e.get("event") == event for e in proc.log_events())


@pytest.mark.connections(17)
async def test_sigterm_with_runs_in_flight_loses_none_and_completes_none_twice(
    db: Database, fast: Settings, tmp_path: Path, effects_file: str
) -> None:
    """SIGTERM while six runs are in flight (each needs 2 s, the grace is 0.5 s): the worker
    hands their leases back and exits 0; a second worker runs them (journaled steps replay)
    and everything completes exactly once."""
    env = {"AWOOOP_TEST_SIDE_EFFECTS": effects_file}
    relay = relay_process(fast, tmp_path).start()
    first = WorkerProcess(fast, tmp_path, "first", args=("--concurrency", "6"), env=env)
    second = WorkerProcess(fast, tmp_path, "second", args=("--concurrency", "6"), env=env)
    first.start().worker_id()
    run_ids = await create_runs(db, P, 12, payload={"sleep": 2.0})
    try:

        async def first_busy() -> bool:
            return len({e["run_id"] for e in read_effects(effects_file) if e["what"] == "one"}) >= 6

        await eventually(first_busy, timeout_s=30, what="first worker busy")
        first.signal(signal.SIGTERM)
        assert first.wait(within_s=20) == 0
        released_early = await count_events(db, "LeaseReleased")
        second.start().worker_id()
        await eventually(lambda: all_finished(db, run_ids), timeout_s=90, what="every run finished")
    finally:
        first.stop()
        second.stop()
        relay.stop()
    assert sum(released_early.values()) == 6  # handed back before the worker exited
    completed = await count_events(db, "RunCompleted")
    assert sorted(completed[run_stream_id(r)] for r in run_ids) == [1] * 12
    for run_id in run_ids:
        state = await load(db, P, run_id)
        assert state.status == "COMPLETED"
        check_single_holder(await events_of(db, P, run_id))
    stopped = [e for e in first.log_events() if e.get("event") == "worker_stopped"]
    assert stopped and stopped[0]["finished"] == {"released": 6}
    ones = Counter(e["run_id"] for e in read_effects(effects_file) if e["what"] == "one")
    assert set(ones.values()) == {1}  # step one of the released runs was not repeated


@pytest.mark.connections(30)
async def test_approvals_through_the_cli(
    db: Database, fast: Settings, tmp_path: Path, effects_file: str
) -> None:
    quick = msgspec.structs.replace(fast, approval_ttl_s=60.0, approval_resolver_interval_s=0.3)
    env = {"AWOOOP_TEST_SIDE_EFFECTS": effects_file}
    approved, expiring = await create_runs(db, P, 2, payload={"approval": True})
    with workers(quick, tmp_path, 1, args=("--with-loops",), env=env) as procs:
        procs[0].worker_id()

        async def both_waiting() -> bool:
            states = [await load(db, P, r) for r in (approved, expiring)]
            return all(s.status == "WAITING_APPROVAL" for s in states)

        await eventually(both_waiting, timeout_s=30, what="both runs waiting for approval")

        async def both_notified() -> bool:  # the notifier runs after the commit
            return len(read_effects(effects_file + ".tickets")) == 2

        await eventually(both_notified, timeout_s=30, what="both tokens handed to the notifier")
        tickets = {t["run_id"]: t for t in read_effects(effects_file + ".tickets")}
        token = tickets[str(approved)]["token"]
        ok = cli(
            quick,
            "runs",
            "approve",
            P,
            str(approved),
            "--token",
            token,
            "--actor",
            "alice",
            "--json",
        )
        assert ok.returncode == 0, ok.stderr
        assert msgspec.json.decode(ok.stdout)["status"] == "RESUMED"
        again = cli(quick, "runs", "approve", P, str(approved), "--token", token)
        assert again.returncode == 1 and again.stderr.startswith("error E-APPROVAL-003:")
        await eventually(
            lambda: all_finished(db, [approved]), timeout_s=30, what="approved run completed"
        )
        # Let the other token expire: the loop fails the run with E-APPROVAL-002.
        async with db.platform_writes() as conn:
            await conn.execute(
                "UPDATE awooop_approvals SET expires_at = now() WHERE run_id = $1", expiring
            )
            await conn.execute(
                "UPDATE awooop_run_state SET approval_expires_at = now() WHERE run_id = $1",
                expiring,
            )
        await eventually(
            lambda: all_finished(db, [expiring]), timeout_s=30, what="expired run failed"
        )
        late = cli(
            quick, "runs", "approve", P, str(expiring), "--token", tickets[str(expiring)]["token"]
        )
        assert late.returncode == 1 and late.stderr.startswith("error E-APPROVAL-002:")
    done = await load(db, P, approved)
    assert (
        done.status == "COMPLETED" and done.saga_steps["approval:go"]["result"]["actor"] == "alice"
    )
    failed = await load(db, P, expiring)
    assert (failed.status, failed.failure_code) == ("FAILED", "E-APPROVAL-002")
    ones = defaultdict(int)
    for e in read_effects(effects_file):
        if e["what"] == "one":
            ones[e["run_id"]] += 1
    assert ones[str(approved)] == 1  # the resumed attempt replayed step one
    cancel = cli(quick, "runs", "cancel", P, str(approved))
    assert cancel.returncode == 1 and cancel.stderr.startswith("error E-RUN-001:")


def waiting_for_database(worker: WorkerProcess) -> bool:
    """Whether the (still running) worker logged that it waits for the database."""
    assert worker.process is not None and worker.process.poll() is None, worker.logs()
    return "waiting_for_database" in worker.logs()


@pytest.mark.long(13)
async def test_a_worker_started_while_postgres_is_down_waits_for_it(
    settings: Settings, tmp_path: Path
) -> None:
    """Started while Postgres is down (say, restarting), a worker logs that it waits, comes up
    when the database is back and runs work; SIGTERM then stops it with exit 0."""
    with private_postgres() as pg:
        url = pg.url.rsplit("/", 1)[0] + "/postgres"
        await migrate(url)
        private = msgspec.structs.replace(settings, database_url=url)
        pg.stop()
        worker = WorkerProcess(
            private, tmp_path, "patient", handler="awooop.examples.handlers:noop"
        )
        worker.start()
        try:
            await eventually(
                lambda: waiting_for_database(worker),
                what="the worker logs waiting_for_database",
            )
            pg.start()
            worker.worker_id(within_s=30)
            db = await Database.open(url, max_size=2)
            try:
                run_ids = await create_runs(db, P, 3)
                await eventually(
                    lambda: all_finished(db, run_ids), timeout_s=30, what="runs after the wait"
                )
            finally:
                await db.close()
            worker.signal(signal.SIGTERM)
            assert worker.wait() == 0
        finally:
            worker.stop()


async def test_a_worker_started_while_postgres_is_full_waits_for_a_free_connection(
    settings: Settings, tmp_path: Path
) -> None:
    """Every connection slot of the server is taken (53300, too many connections): the worker
    waits with backoff instead of exiting with a traceback, and starts when slots free up."""
    with private_postgres(max_connections=12) as pg:
        url = pg.url.rsplit("/", 1)[0] + "/postgres"
        await migrate(url)
        private = msgspec.structs.replace(settings, database_url=url)
        db = await Database.open(url, max_size=1)
        run_ids = await create_runs(db, P, 3)
        await db.close()
        held: list[asyncpg.Connection[asyncpg.Record]] = []
        worker = WorkerProcess(private, tmp_path, "crowded", handler=NOOP)
        try:
            while True:  # take every slot, the superuser-reserved ones too
                try:
                    held.append(await asyncpg.connect(url))
                except asyncpg.TooManyConnectionsError:
                    break
            worker.start()
            await eventually(
                lambda: waiting_for_database(worker),
                what="the worker logs waiting_for_database",
            )
            assert "too many" in worker.logs()
            for conn in held:
                await conn.close()
            held.clear()
            worker.worker_id(within_s=30)
            db = await Database.open(url, max_size=2)
            try:
                await eventually(
                    lambda: all_finished(db, run_ids), timeout_s=30, what="runs after the wait"
                )
            finally:
                await db.close()
            worker.signal(signal.SIGTERM)
            assert worker.wait() == 0
            assert "Traceback" not in worker.logs()
        finally:
            for conn in held:
                await conn.close()
            worker.stop()


async def test_a_worker_stopped_while_it_waits_for_postgres_exits_0(
    settings: Settings, tmp_path: Path
) -> None:
    private = msgspec.structs.replace(
        settings, database_url=f"postgresql://postgres@127.0.0.1:{free_port()}/none"
    )
    worker = WorkerProcess(private, tmp_path, "waiting", handler=NOOP)
    worker.start()
    try:
        await eventually(
            lambda: waiting_for_database(worker), what="the worker logs waiting_for_database"
        )
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
    finally:
        worker.stop()


def metric(body: str, name: str) -> float:
    """The value of one sample line ``name`` (with its labels) of a /metrics page."""
    for line in body.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not on the page:\n{body[:3000]}")


def projected(page: str) -> list[float]:
    """The run_timeline projector's event counters on a /metrics page."""
    return [
        float(line.rsplit(" ", 1)[1])
        for line in page.splitlines()
        if line.startswith(
            ("awooop_projector_events_total{", "awooop_projector_reconciled_events_total{")
        )
        and 'projection="run_timeline"' in line
    ]


@pytest.mark.connections(23)
async def test_worker_and_projector_processes_serve_their_metrics(
    db: Database, fast: Settings, tmp_path: Path
) -> None:
    """R-51: every process serves /metrics on AWOOOP_METRICS_PORT (relay, serve and loops are
    scraped in their own tests)."""
    ports = {"worker": free_port(), "projector": free_port()}
    run_ids = await create_runs(db, P, 5)
    projector = WorkerProcess(
        fast,
        tmp_path,
        "projector",
        command=("projector", "run_timeline"),
        env={"AWOOOP_METRICS_PORT": str(ports["projector"])},
    ).start()
    try:
        with workers(
            fast, tmp_path, 1, handler=NOOP, env={"AWOOOP_METRICS_PORT": str(ports["worker"])}
        ) as procs:
            procs[0].worker_id()
            await eventually(
                lambda: all_finished(db, run_ids), timeout_s=60, what="5 runs finished"
            )

            pages: dict[str, str] = {}

            async def every_event_counted() -> bool:
                # Claims and completions reach the projector up to AWOOOP_RELAY_LINGER_S after
                # their commit: wait for its counters, not for the runs' first events.
                assert projector.process is not None and projector.process.poll() is None, (
                    f"the projector exited:\n{projector.logs()[-3000:]}"
                )
                async with httpx.AsyncClient(timeout=10) as client:
                    for name, port in ports.items():
                        pages[name] = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
                return sum(projected(pages["projector"])) >= 15  # 3 events per run

            # Nothing above waits for the projector: on a busy machine it may still be opening
            # its connections, and it serves /metrics only after that.
            await eventually(
                every_event_counted,
                timeout_s=60,
                ignoring=(httpx.TransportError,),
                what="the projector counted every event",
            )
    finally:
        projector.stop()
    worker, projection = pages["worker"], pages["projector"]
    assert metric(worker, 'awooop_runs_finished_total{status="COMPLETED"}') == 5
    assert (
        sum(
            metric(worker, f'awooop_lease_claims_total{{path="{path}"}}')
            for path in ("stream", "poll", "reclaim")
            if f'path="{path}"' in worker
        )
        >= 5
    )
    assert "awooop_background_loop_last_run_timestamp" in worker
    assert sum(projected(projection)) >= 15  # 3 events per run, from the stream or reconcile
    async with db.platform() as conn:
        assert await conn.fetchval("SELECT count(*) FROM awooop_run_timeline") == 15
    assert "awooop_background_loop_last_run_timestamp" in projection
