"""Durable sleeps on one worker: do sleeping runs leave their slots free while they sleep?

    .venv/bin/python ops/bench/sleeps.py [--runs 1000] [--sleep-s 2] [--concurrency 10]
                                         [--rounds 3] [--warmup 20] [--batch 500]
                                         [--with-loops] [--code DIR ...] [--out FILE]
                                         [--keep-logs DIR]

Prints one JSON document and keeps it in ``ops/bench/results/sleeps-<time>.json``. Every process
is real, on the benchmark's own PostgreSQL (fsync on, ``pg_stat_statements``) and Redis
(``cost.Servers``): one ``awooop relay``, ONE ``awooop worker --concurrency --concurrency``
(handler ``worker_handlers:sleep_once``) and one ``awooop loops run timers`` (the timers loop,
which fires the sleeps). ``--with-loops``: the worker runs every background loop itself
(``awooop worker --with-loops``, as the acceptance tests do: the projectors and a relay loop
too, their CPU counted as the worker's) and no loops process is started.

Each round measures two modes, each on a fresh database: ``plain``, ``--runs`` runs that do
nothing, and ``sleep``, the same runs each sleeping ``--sleep-s`` seconds (``run.sleep``). In
each: ``--warmup`` runs of the mode first (sleeps of 0.3 s), then ALL runs are submitted with
``submit_many`` in ONE transaction and the clock starts at its commit. Measured until every run
ended:

- ``wall_s``: the commit to the last ``RunCompleted``; per round, ``bound_s`` = ``--sleep-s`` +
  the round's plain ``wall_s`` and ``ratio`` = the sleep ``wall_s`` / ``bound_s`` (the target:
  at most 1: the slots are free while the runs sleep); ``excess_s`` in the summary splits the
  sleep ``wall_s`` over ``bound_s`` into three parts that add up to it (medians): the last
  ``WaitStarted`` after the plain burst's end (``first_half_s``), the last ``TimerFired`` after
  the last sleep's due time (``fired_s``), and the last ``RunCompleted`` after it
  (``resumed_s``);
- CPU (user + system from /proc) in ms per run of each role: ``worker``, ``relay``, ``timers``
  (the loops process), ``postgres_backends`` (the client backends of the benchmark's database,
  the benchmark's and the producer's own connections left out) and ``runtime``, their sum;
- Postgres statements per run (``pg_stat_statements`` of the database, reset after the warm-up;
  BEGIN and COMMIT count), and the most called ones;
- in the ``sleep`` mode, from the journal: ``wake_to_resume`` (``TimerFired`` to the run's next
  ``RunClaimed``) and ``timer_late`` (the sleep's due time to its ``TimerFired``), p50/p99/max;
- ``attempt_ms``: each attempt's ``RunClaimed`` to its last write (``WaitStarted`` or
  ``RunCompleted``), p50/p99/max, for the first attempts (every attempt in ``plain``) and the
  resumed ones;
- errors: runs not COMPLETED, runs claimed more often than their attempts need (1 plain, 2
  sleeping), a ``RunCompleted`` or ``TimerFired`` written more than once.

A/B: ``--code DIR`` (repeatable) runs the relay, the worker and the migrations from another
checkout (``cost.py``'s rule: its ``.venv`` when it has one; the handler always comes from this
folder); the codes take turns within each round (A B, then B A, ...), and ``summary`` gives
each code's medians over the rounds and their ratios to the first code's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import asyncpg

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(HERE)]

import agents_stats as stats  # noqa: E402 - after the sys.path line, for a plain script
import cost_measure as measure  # noqa: E402
from cost import Servers  # noqa: E402
from scratch import report  # noqa: E402
from worker import HANDLERS, Processes, process_env, python_of  # noqa: E402

from awooop.core.config import load_settings  # noqa: E402
from awooop.core.pools import init_connection  # noqa: E402
from awooop.producer import ChannelEvent, set_tenant, submit_many  # noqa: E402

PROJECT = "bench"
TICK = os.sysconf("SC_CLK_TCK")
MARK = "/* sleeps-bench */"
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED")
ROLES = ("worker", "relay", "timers", "postgres_backends")
JOURNAL = """/* sleeps-bench */
SELECT substr(stream_id, 5) AS run, event_type, version,
       extract(epoch FROM (data->>'at')::timestamptz)::float8 AS at,
       extract(epoch FROM (data->>'due_at')::timestamptz)::float8 AS due
FROM awooop_events
WHERE stream_id LIKE 'run-%'
  AND event_type IN ('RunClaimed', 'WaitStarted', 'TimerFired', 'RunCompleted')
ORDER BY stream_id, version
"""


class Stack:
    """One measurement: a scratch database on the servers, migrated by ``code``, its relay and
    worker, the benchmark's connection and the producer's."""

    def __init__(self, servers: Servers, code: Path, args: argparse.Namespace, logs: Path) -> None:
        self.servers, self.code, self.with_loops = servers, code, args.with_loops
        self.name = f"sleeps_{uuid.uuid4().hex[:10]}"
        self.url = servers.url(self.name)
        self.env = process_env(self.url, servers.redis.url, f"sleeps{uuid.uuid4().hex[:8]}", code)
        self.procs = Processes(logs, code)
        self.concurrency = args.concurrency
        self.pids: dict[int, str] = {}
        self.conn: asyncpg.Connection | None = None
        self.producer: asyncpg.Connection | None = None
        self.count = 0

    async def __aenter__(self) -> Stack:
        argv = [python_of(self.code), "-m", "awooop.cli", "migrate"]
        done = await asyncio.create_subprocess_exec(
            *argv, cwd=self.code, env=self.env, stderr=asyncio.subprocess.PIPE
        )
        _out, err = await done.communicate()
        if done.returncode != 0:
            raise RuntimeError(f"migrate failed: {err.decode()[-2000:]}")
        self.conn = await asyncpg.connect(self.url)
        await self.conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        self.pids[await self.conn.fetchval("SELECT pg_backend_pid()")] = "bench"
        self.producer = await asyncpg.connect(self.url)
        await init_connection(self.producer)
        self.pids[await self.producer.fetchval("SELECT pg_backend_pid()")] = "producer"
        self.pids[self.procs.start("relay", ["relay"], self.env).pid] = "relay"
        args = ["worker", "--handler", f"{HANDLERS}:sleep_once"]
        args += ["--concurrency", str(self.concurrency)]
        args += ["--with-loops"] if self.with_loops else []
        self.pids[self.procs.start("worker", args, self.env).pid] = "worker"
        if not self.with_loops:
            self.pids[self.procs.start("timers", ["loops", "run", "timers"], self.env).pid] = (
                "timers"
            )
        await asyncio.to_thread(self.procs.wait_started, "worker")
        await asyncio.sleep(0.5)  # the relay and the consumer group settle (as worker.py)
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await asyncio.to_thread(self.procs.stop_all)
        for conn in (self.conn, self.producer):
            if conn is not None:
                await conn.close()
        admin = await asyncpg.connect(self.servers.url("postgres"))
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        finally:
            await admin.close()

    async def fetch(self, query: str, *args: object) -> list[asyncpg.Record]:
        assert self.conn is not None
        return list(await self.conn.fetch(f"{MARK} {query}", *args))

    async def ended(self) -> int:
        rows = await self.fetch(
            "SELECT count(*) AS n FROM awooop_run_state WHERE status = ANY($1)", list(TERMINAL)
        )
        return int(rows[0]["n"])

    async def wait_ended(self, count: int, within_s: float) -> None:
        deadline = time.monotonic() + within_s
        while await self.ended() < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"not all of {count} runs ended within {within_s} s")
            await asyncio.sleep(0.1)

    async def submit(self, runs: int, sleep_s: float, batch: int) -> float:
        """``runs`` runs in one transaction; the time of its commit."""
        assert self.producer is not None
        settings = load_settings(
            environ={}, database_url=self.url, redis_url=self.servers.redis.url
        )
        async with self.producer.transaction():
            await set_tenant(self.producer, PROJECT)
            for start in range(0, runs, batch):
                events = [
                    ChannelEvent("api", uuid.uuid4().hex, {"sleep_s": sleep_s, "n": self.count + i})
                    for i in range(min(batch, runs - start))
                ]
                self.count += len(events)
                await submit_many(self.producer, PROJECT, events, settings=settings)
        return time.time()

    async def statements(self, runs: int) -> dict[str, Any]:
        rows = await self.fetch(
            "SELECT query, calls, total_exec_time FROM pg_stat_statements s "
            "JOIN pg_database d ON d.oid = s.dbid "
            "WHERE d.datname = current_database() AND s.query NOT LIKE $1 ORDER BY calls DESC",
            f"%{MARK}%",
        )
        return {
            "per_run": round(sum(r["calls"] for r in rows) / runs, 2),
            "exec_ms_per_run": round(sum(r["total_exec_time"] for r in rows) / runs, 3),
            "most_called": [
                {
                    "per_run": round(r["calls"] / runs, 3),
                    "exec_ms_per_run": round(r["total_exec_time"] / runs, 3),
                    "query": " ".join(r["query"].split())[:120],
                }
                for r in rows[:24]
            ],
        }


def cpu_ms_per_run(stack: Stack, before: Any, after: Any, runs: int) -> dict[str, float]:
    procs = {**before, **after}
    roles = dict(stack.pids)
    postmaster = stack.servers.postmaster()
    for pid, proc in procs.items():
        if pid not in roles and proc.ppid == postmaster:
            roles[pid] = stats.postgres_role(proc.title, stack.name)
    seconds = measure.cpu_by_role(before, after, roles, TICK).seconds
    ms = {role: round(seconds.get(role, 0.0) * 1000 / runs, 3) for role in ROLES}
    ms["runtime"] = round(sum(ms.values()), 3)
    return ms


def journal_figures(rows: list[asyncpg.Record], ids: set[str], sleeping: bool) -> dict[str, Any]:
    by_run: dict[str, list[asyncpg.Record]] = {}
    for r in rows:
        if r["run"] in ids:
            by_run.setdefault(r["run"], []).append(r)
    counts = {run: Counter(e["event_type"] for e in events) for run, events in by_run.items()}
    claims_each = 2 if sleeping else 1
    wake, late = [], []
    for events in by_run.values():
        fired = next((e for e in events if e["event_type"] == "TimerFired"), None)
        if fired is None:
            continue
        late.append((fired["at"] - fired["due"]) * 1000)
        resumed = [
            e for e in events if e["event_type"] == "RunClaimed" and e["version"] > fired["version"]
        ]
        if resumed:
            wake.append((resumed[0]["at"] - fired["at"]) * 1000)

    def times(kind: str) -> list[float]:
        return sorted(
            e["at"] for events in by_run.values() for e in events if e["event_type"] == kind
        )

    completed = times("RunCompleted")
    first, resumed = attempt_ms(by_run)
    return {
        "last_completed": completed[-1] if completed else None,
        # unix times of the phases (made relative to the commit by the caller)
        "phases": {
            "last_wait_started": max(times("WaitStarted"), default=None),
            "first_fired": min(times("TimerFired"), default=None),
            "last_fired": max(times("TimerFired"), default=None),
            "half_completed": completed[len(completed) // 2] if completed else None,
        },
        "errors": {
            "claimed_more_than_needed": sum(
                1 for c in counts.values() if c["RunClaimed"] > claims_each
            ),
            "completed_twice": sum(1 for c in counts.values() if c["RunCompleted"] > 1),
            "fired_twice": sum(1 for c in counts.values() if c["TimerFired"] > 1),
            "not_fired": sum(1 for c in counts.values() if sleeping and c["TimerFired"] == 0),
        },
        "wake_to_resume": stats.spread(wake) if sleeping else None,
        # an attempt's claim to its last write (WaitStarted, RunCompleted): the first
        # attempts (all of them in plain mode) and the resumed ones
        "attempt_ms": {"first": stats.spread(first), "resumed": stats.spread(resumed)},
        "timer_late": stats.spread(late) if sleeping else None,
    }


def attempt_ms(by_run: dict[str, list[asyncpg.Record]]) -> tuple[list[float], list[float]]:
    """Each attempt's claim to its end (ms), the first attempts' and the resumed ones'."""
    first: list[float] = []
    resumed: list[float] = []
    for events in by_run.values():
        claimed = None
        for e in events:
            if e["event_type"] == "RunClaimed":
                claimed = e
            elif e["event_type"] in ("WaitStarted", "RunCompleted") and claimed is not None:
                into = resumed if claimed["version"] > 2 else first  # after a TimerFired
                into.append((e["at"] - claimed["at"]) * 1000)
                claimed = None
    return first, resumed


async def measure_mode(
    servers: Servers, code: Path, sleep_s: float, args: argparse.Namespace, logs: Path
) -> dict[str, Any]:
    async with Stack(servers, code, args, logs) as stack:
        await stack.submit(args.warmup, 0.3 if sleep_s else 0.0, args.batch)
        await stack.wait_ended(args.warmup, 120)
        await asyncio.sleep(1.0)
        seen = {
            r["run"] for r in await stack.fetch("SELECT run_id::text AS run FROM awooop_run_state")
        }
        await stack.fetch("SELECT pg_stat_statements_reset()::text")
        before = measure.snapshot()
        committed = await stack.submit(args.runs, sleep_s, args.batch)
        await stack.wait_ended(args.warmup + args.runs, 600)
        after = measure.snapshot()
        statements = await stack.statements(args.runs)
        rows = await stack.fetch("SELECT run_id::text AS run, status FROM awooop_run_state")
        ids = {r["run"] for r in rows} - seen
        statuses = Counter(r["status"] for r in rows if r["run"] in ids)
        log = journal_figures(await stack.fetch(JOURNAL), ids, sleep_s > 0)
        cpu = cpu_ms_per_run(stack, before, after, args.runs)
    last = log.pop("last_completed")
    log["phases"] = {
        k: None if v is None else round(v - committed, 3) for k, v in log["phases"].items()
    }
    return {
        "wall_s": round(last - committed, 3) if last is not None else None,
        "cpu_ms_per_run": cpu,
        "statements": statements,
        **log,
        "errors": {"not_completed": args.runs - statuses.get("COMPLETED", 0), **log["errors"]},
    }


def excess(plain_wall_s: float, sleep: dict[str, Any], sleep_s: float) -> dict[str, float]:
    """Pure: where a round's sleep ``wall_s`` went over its bound (``sleep_s`` + the plain
    ``wall_s``), in three parts that add up to it: ``first_half_s``, the last ``WaitStarted``
    against the plain burst's end (the first halves of the runs against whole plain runs);
    ``fired_s``, the last ``TimerFired`` against the last sleep's due time (the timer's lag);
    ``resumed_s``, the last ``RunCompleted`` after it (the last resumed attempt)."""
    phases = sleep["phases"]
    last_due = phases["last_wait_started"] + sleep_s
    return {
        "first_half_s": round(phases["last_wait_started"] - plain_wall_s, 3),
        "fired_s": round(phases["last_fired"] - last_due, 3),
        "resumed_s": round(sleep["wall_s"] - phases["last_fired"], 3),
    }


def median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def summarise(rounds: list[dict[str, Any]], codes: list[str], sleep_s: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for code in codes:
        mine = [r[code] for r in rounds]
        plain = [r["plain"]["wall_s"] for r in mine]
        sleep = [r["sleep"]["wall_s"] for r in mine]
        ratios = [s / (sleep_s + p) for s, p in zip(sleep, plain, strict=True)]
        excesses = [excess(r["plain"]["wall_s"], r["sleep"], sleep_s) for r in mine]
        cpu = {
            mode: {
                role: median([r[mode]["cpu_ms_per_run"][role] for r in mine])
                for role in (*ROLES, "runtime")
            }
            for mode in ("plain", "sleep")
        }
        out[code] = {
            "plain_wall_s": median(plain),
            "sleep_wall_s": median(sleep),
            "bound_s": median([sleep_s + p for p in plain]),
            "ratio": median(ratios),
            "ratios": [round(x, 3) for x in ratios],
            "excess_s": {
                part: median([parts[part] for parts in excesses])
                for part in ("first_half_s", "fired_s", "resumed_s")
            },
            "cpu_ms_per_run": cpu,
            "statements_per_run": {
                mode: median([r[mode]["statements"]["per_run"] for r in mine])
                for mode in ("plain", "sleep")
            },
            "wake_to_resume_p50_ms": median([r["sleep"]["wake_to_resume"]["p50_ms"] for r in mine]),
            "wake_to_resume_p99_ms": median([r["sleep"]["wake_to_resume"]["p99_ms"] for r in mine]),
            "attempt_p50_ms": {
                "plain": median([r["plain"]["attempt_ms"]["first"]["p50_ms"] for r in mine]),
                "first": median([r["sleep"]["attempt_ms"]["first"]["p50_ms"] for r in mine]),
                "resumed": median([r["sleep"]["attempt_ms"]["resumed"]["p50_ms"] for r in mine]),
            },
            "timer_late_p50_ms": median([r["sleep"]["timer_late"]["p50_ms"] for r in mine]),
            "errors": sum(sum(r[m]["errors"].values()) for r in mine for m in ("plain", "sleep")),
        }
    first = out[codes[0]]
    for code in codes[1:]:
        out[code]["to_first"] = {
            key: round(out[code][key] / first[key], 3)
            for key in ("plain_wall_s", "sleep_wall_s", "ratio")
            if out[code][key] and first[key]
        }
    return out


async def run_all(args: argparse.Namespace) -> dict[str, Any]:
    codes: list[str] = args.code
    result: dict[str, Any] = {
        "benchmark": "sleeps",
        "command": " ".join(["ops/bench/sleeps.py", *sys.argv[1:]]),
        "machine": {"cpus": os.cpu_count(), "load_avg": os.getloadavg()},
        "config": {
            k: getattr(args, k)
            for k in ("runs", "sleep_s", "concurrency", "rounds", "warmup", "with_loops")
        },
        "codes": codes,
        "rounds": [],
    }
    with tempfile.TemporaryDirectory(prefix="awooop-sleeps-") as scratch:
        logs = Path(args.keep_logs) if args.keep_logs else Path(scratch)
        servers = Servers(Path(scratch) / "servers")
        servers.start()
        try:
            for i in range(args.rounds):
                entry: dict[str, Any] = {}
                for code in codes if i % 2 == 0 else codes[::-1]:
                    entry[code] = {
                        "plain": await measure_mode(servers, Path(code), 0.0, args, logs),
                        "sleep": await measure_mode(servers, Path(code), args.sleep_s, args, logs),
                    }
                    brief = {m: entry[code][m]["wall_s"] for m in ("plain", "sleep")}
                    print(f"round {i} {code}: {json.dumps(brief)}", file=sys.stderr, flush=True)
                result["rounds"].append(entry)
        finally:
            servers.stop()
    result["summary"] = summarise(result["rounds"], codes, args.sleep_s)
    result["machine"]["load_avg_after"] = os.getloadavg()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--sleep-s", type=float, default=2.0)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--batch", type=int, default=500, help="runs per submit_many call")
    parser.add_argument(
        "--with-loops", action="store_true", help="the worker runs the loops (no loops process)"
    )
    parser.add_argument("--code", action="append", help="a checkout to measure (repeatable)")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    parser.add_argument("--keep-logs", default=None, help="a folder for the processes' logs")
    args = parser.parse_args()
    if args.keep_logs:
        Path(args.keep_logs).mkdir(parents=True, exist_ok=True)
    args.code = [str(Path(c).resolve()) for c in (args.code or [str(ROOT)])]
    result = asyncio.run(run_all(args))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    report(result, "sleeps")


if __name__ == "__main__":
    main()
