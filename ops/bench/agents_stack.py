"""The agents benchmark's processes (``agents.py``): one shape's scratch database and key prefix
on the benchmark's servers, its ``awooop relay``, ``awooop worker`` processes and, for the
sleeping agent, ``awooop loops run timers``; the benchmark's producer (a caller's transaction of
``submit_many``); ``py-spy`` attached to the workers; and the /proc reads of the workers'
memory. Imported by ``agents.py``, which puts this folder and the checkout on the path.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import agents_stats as stats
import asyncpg
from agents_waits import Agent
from cost import Servers
from worker import HANDLERS, Processes, process_env, python_of

from awooop.core.config import load_settings
from awooop.core.pools import init_connection
from awooop.producer import ChannelEvent, set_tenant, submit_many

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "bench"  # as worker.py
MARK = "/* agents-bench */"  # the benchmark's own statements
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED")


def proc_status(pid: int, field: str) -> int | None:
    """A field of /proc/PID/status in kB (VmRSS, VmHWM), None when unreadable."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def reset_peak(pid: int) -> bool:
    """Reset the process's VmHWM to its current RSS (``clear_refs`` 5, Linux 4.0+)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


class AgentStack:
    """One shape's scratch database and key prefix on the servers, its relay and worker
    processes (and the timers loop's, when the agent sleeps), and the benchmark's own
    connection (its transactions counted, to be left out)."""

    def __init__(self, servers: Servers, shape: stats.Shape, logs: Path, agent: Agent) -> None:
        self.servers = servers
        self.shape = shape
        self.agent = agent
        self.name = f"agents_{uuid.uuid4().hex[:10]}"
        self.url = servers.url(self.name)
        llm = f"local:?delay_ms={shape.delay_ms}&jitter_ms={shape.jitter_ms}"
        self.env = process_env(
            self.url, servers.redis.url, f"agents{uuid.uuid4().hex[:8]}", ROOT, llm_url=llm
        )
        self.procs = Processes(logs, ROOT)
        self.pids: dict[int, str] = {}
        self.workers: list[int] = []
        self.conn: asyncpg.Connection | None = None
        self.own_xacts = 0

    async def __aenter__(self) -> AgentStack:
        done = await asyncio.to_thread(self.cli, "migrate")
        if done.returncode != 0:
            raise RuntimeError(f"migrate failed: {done.stderr[-2000:]}")
        self.conn = await asyncpg.connect(self.url)
        await self.value("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")  # Servers loads it
        self.pids[await self.conn.fetchval("SELECT pg_backend_pid()")] = "bench"
        assert self.servers.redis.process is not None
        self.pids[self.servers.redis.process.pid] = "redis"
        self.pids[self.procs.start("relay", ["relay"], self.env).pid] = "relay"
        if self.agent.timers:  # fires the sleeps (as sleeps.py)
            timers = self.procs.start("timers", ["loops", "run", "timers"], self.env)
            self.pids[timers.pid] = "timers"
        args = ["worker", "--handler", f"{HANDLERS}:{self.agent.handler}"]
        args += ["--concurrency", str(self.shape.per_worker)]
        for i in range(self.shape.workers):
            pid = self.procs.start(f"w{i}", args, self.env).pid
            self.pids[pid] = "worker"
            self.workers.append(pid)
        for i in range(self.shape.workers):
            await asyncio.to_thread(self.procs.wait_started, f"w{i}")
        await asyncio.sleep(0.5)  # the relay and the consumer groups settle (as worker.py)
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await asyncio.to_thread(self.procs.stop_all)
        if self.conn is not None:
            await self.conn.close()
        admin = await asyncpg.connect(self.servers.url("postgres"))
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        finally:
            await admin.close()

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        argv = [python_of(ROOT), "-m", "awooop.cli", *args]
        return subprocess.run(argv, cwd=ROOT, env=self.env, capture_output=True, text=True)

    async def fetch(self, query: str, *args: object) -> list[asyncpg.Record]:
        assert self.conn is not None
        self.own_xacts += 1
        return list(await self.conn.fetch(f"{MARK} {query}", *args))

    async def value(self, query: str, *args: object) -> Any:
        assert self.conn is not None
        self.own_xacts += 1
        return await self.conn.fetchval(f"{MARK} {query}", *args)

    async def statuses(self) -> Counter[str]:
        rows = await self.fetch("SELECT status, count(*) AS n FROM awooop_run_state GROUP BY 1")
        return Counter({r["status"]: r["n"] for r in rows})

    async def wait_ended(self, count: int, within_s: float = 300) -> None:
        deadline = time.monotonic() + within_s
        ended = 0
        while ended < count and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            statuses = await self.statuses()
            ended = sum(statuses.get(s, 0) for s in TERMINAL)
        if ended < count:
            raise RuntimeError(f"{ended} of {count} runs ended in {within_s} s")

    async def statements(self, steps: int) -> dict[str, Any]:
        """Statements per step of the runtime (``pg_stat_statements`` of the database, the
        benchmark's own left out) and the most called ones: which statements a step costs."""
        rows = await self.fetch(
            "SELECT query, calls, total_exec_time, total_plan_time, plans "
            "FROM pg_stat_statements s "
            "JOIN pg_database d ON d.oid = s.dbid "
            "WHERE d.datname = current_database() AND s.query NOT LIKE $1 AND s.calls > 0 "
            "ORDER BY calls DESC",
            f"%{MARK}%",
        )
        updates = await self.fetch(
            "SELECT relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
            "WHERE relname IN ('awooop_run_state', 'awooop_event_streams') ORDER BY relname"
        )
        return {
            "per_step": round(sum(r["calls"] for r in rows) / steps, 3),
            # Row updates per step and the share of them that were HOT (no index entries):
            # counted since the database was made, the warm-up included.
            "row_updates": {
                r["relname"]: {
                    "per_step": round(r["n_tup_upd"] / steps, 3),
                    "hot_share": round(r["n_tup_hot_upd"] / max(1, r["n_tup_upd"]), 3),
                }
                for r in updates
            },
            "exec_ms_per_step": round(sum(r["total_exec_time"] for r in rows) / steps, 4),
            "most_called": [
                {
                    "calls_per_step": round(r["calls"] / steps, 3),
                    "mean_exec_ms": round(r["total_exec_time"] / r["calls"], 3),
                    "plans_per_call": round(r["plans"] / r["calls"], 3),
                    "mean_plan_ms": round(r["total_plan_time"] / max(1, r["plans"]), 3),
                    "query": " ".join(r["query"].split())[:100],
                }
                for r in rows[:8]
            ],
        }

    async def xacts(self) -> tuple[int, float]:
        """(committed transactions of the benchmark database less the benchmark's own, when
        read); the other backends flush their counters within 10 s (``--settle``)."""
        await self.value("SELECT pg_stat_force_next_flush()::text")
        committed: int = await self.value(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
        return committed - self.own_xacts, time.time()


class Producer:
    """The benchmark's producer: one connection of its own, a caller's transaction."""

    def __init__(self, stack: AgentStack) -> None:
        self.stack = stack
        self.agent = stack.agent
        self.settings = load_settings(
            environ={}, database_url=stack.url, redis_url=stack.servers.redis.url
        )
        self.conn: asyncpg.Connection | None = None
        self.count = 0

    async def open(self) -> None:
        self.conn = await asyncpg.connect(self.stack.url)
        await init_connection(self.conn)  # the codecs a caller's pool sets up (docs/ingest.md)
        self.stack.pids[await self.conn.fetchval("SELECT pg_backend_pid()")] = "producer"

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()

    async def submit(
        self, runs: int, steps: int, batch: int, before_commit: Any = None, *, warmup: bool = False
    ) -> list[str]:
        """``runs`` runs of ``steps`` steps in one transaction, their input with the agent's
        fields (its warm-up fields when ``warmup``); ``before_commit()`` is called last inside
        it. The runs' ids."""
        fields = self.agent.warmup_fields if warmup else self.agent.fields
        assert self.conn is not None
        ids: list[str] = []
        async with self.conn.transaction():
            await set_tenant(self.conn, PROJECT)
            for start in range(0, runs, batch):
                events = [
                    ChannelEvent(
                        "api", uuid.uuid4().hex, {"steps": steps, "n": self.count + i, **fields}
                    )
                    for i in range(min(batch, runs - start))
                ]
                self.count += len(events)
                done = await submit_many(self.conn, PROJECT, events, settings=self.settings)
                ids.extend(str(d.run_id) for d in done)
            if before_commit is not None:
                before_commit()
        self.stack.own_xacts += 1  # the benchmark's, not the runtime's
        return ids


class Profiler:
    """``py-spy record`` attached to each worker (``--format raw``), stopped with SIGINT."""

    def __init__(self, pids: list[int], rate: int, directory: Path) -> None:
        self.exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        self.available = Path(self.exe).exists()
        self.pids, self.rate, self.directory = pids, rate, directory
        self.procs: list[tuple[Path, subprocess.Popen[bytes]]] = []

    def start(self) -> None:
        for pid in self.pids if self.available else []:
            out = self.directory / f"py-spy-{pid}.txt"
            argv = [self.exe, "record", "--pid", str(pid), "--rate", str(self.rate)]
            argv += ["--format", "raw", "--nonblocking", "-o", str(out)]
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            self.procs.append((out, proc))

    def stop(self) -> str:
        """The samples of every worker, raw (one text)."""
        texts = []
        for out, proc in self.procs:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if out.exists():
                texts.append(out.read_text())
        return "\n".join(texts)
