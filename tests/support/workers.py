"""Workers for tests: the real ``awooop worker`` CLI in subprocesses (acceptance tests), and
in-process workers assembled as the CLI assembles them (:func:`streaming_worker`)."""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import msgspec

from awooop.core.config import Settings, env_name
from awooop.core.db import Database
from awooop.core.loops import run_loop
from awooop.runs import leases
from awooop.streams.keys import Keys
from awooop.worker.assembly import build_worker
from awooop.worker.runtime import Worker
from awooop.worker.streaming import StreamIntake
from tests.support import handlers
from tests.support.runs import create_runs

ROOT = Path(__file__).resolve().parents[2]


def worker_env(settings: Settings, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWOOOP_")}
    for field in msgspec.structs.fields(Settings):
        env[env_name(field.name)] = str(getattr(settings, field.name))
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra or {})
    return env


class WorkerProcess:
    def __init__(
        self,
        settings: Settings,
        directory: Path,
        name: str,
        *,
        handler: str = "tests.support.handlers:journaled",
        args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        command: tuple[str, ...] | None = None,
    ) -> None:
        self.name = name
        self.stdout_path = directory / f"{name}.out"
        self.stderr_path = directory / f"{name}.log"
        self.command = [
            sys.executable,
            "-m",
            "awooop.cli",
            *(command or ("worker", "--handler", handler, *args)),
        ]
        self.env = worker_env(settings, env)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.process = subprocess.Popen(
                self.command, cwd=ROOT, env=self.env, stdout=out, stderr=err
            )
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def worker_id(self, within_s: float = 30) -> str:
        """Wait until the worker prints ``worker <id> started``; return the id."""
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            text = self.stdout_path.read_text() if self.stdout_path.exists() else ""
            for line in text.splitlines():
                if line.startswith("worker ") and line.endswith(" started"):
                    return line.split()[1]
            if self.process is not None and self.process.poll() is not None:
                raise AssertionError(f"{self.name} exited early:\n{self.logs()[-3000:]}")
            time.sleep(0.05)
        raise AssertionError(f"{self.name} did not start:\n{self.logs()[-3000:]}")

    def signal(self, sig: signal.Signals) -> None:
        assert self.process is not None
        self.process.send_signal(sig)

    def wait(self, within_s: float = 30) -> int:
        assert self.process is not None
        return self.process.wait(timeout=within_s)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def logs(self) -> str:
        return self.stderr_path.read_text() if self.stderr_path.exists() else ""

    def log_events(self) -> list[dict[str, Any]]:
        found = []
        for line in self.logs().splitlines():
            if line.startswith("{"):
                try:
                    found.append(msgspec.json.decode(line))
                except msgspec.DecodeError:
                    continue
        return found


def cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    """One ``awooop`` command with ``settings`` in its environment."""
    return subprocess.run(
        [sys.executable, "-m", "awooop.cli", *args],
        cwd=ROOT,
        env=worker_env(settings),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def relay_process(settings: Settings, directory: Path, name: str = "relay") -> WorkerProcess:
    """``awooop relay``: publishes the event log to the work streams."""
    return WorkerProcess(settings, directory, name, command=("relay",))


@contextmanager
def workers(
    settings: Settings, directory: Path, count: int, *, relay: bool = True, **kwargs: Any
) -> Iterator[list[WorkerProcess]]:
    """``count`` worker processes, and a relay unless ``relay`` is False (polling only)."""
    relays = [relay_process(settings, directory).start()] if relay else []
    procs = [WorkerProcess(settings, directory, f"w{i}", **kwargs).start() for i in range(count)]
    try:
        yield procs
    finally:
        for proc in [*procs, *relays]:
            proc.stop()


def streaming_worker(
    db: Database, settings: Settings, redis: Any, **kwargs: Any
) -> tuple[Worker, StreamIntake]:
    """A worker taking work from the streams through ``redis`` and its stream intake, put
    together by :func:`build_worker` (the handler: ``handlers.journaled`` unless given). The
    test runs them as it needs: ``worker.run(stop, extra=[intake.run, ...])``."""
    kwargs.setdefault("handler", handlers.journaled)
    parts = build_worker(
        db=db,
        settings=settings,
        redis=redis,
        keys=Keys(settings.redis_key_prefix, settings.shard_count),
        **kwargs,
    )
    assert parts.intake is not None
    return parts.worker, parts.intake


@asynccontextmanager
async def serving_worker(
    worker: Worker, intake: StreamIntake, *, reclaim: bool = True
) -> AsyncIterator[None]:
    """The worker serving with its stream intake until the block ends; then a clean stop.
    ``reclaim``: with the intake's reclaim loop, as a worker process runs it: an entry whose
    claim failed (a statement or a connection that did not come in time, as a loaded machine
    sometimes has it) stays pending until the reclaim delivers it again after a lease. A test
    that waits for entries to be acknowledged needs it, or one slow connection fails it."""
    stop = asyncio.Event()
    extra: list[Any] = [intake.run]
    if reclaim:
        extra.append(functools.partial(run_loop, intake.reclaim_spec()))
    task = asyncio.create_task(worker.run(stop, extra=extra))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def holding_worker(
    db: Database, settings: Settings, project: str, runs: int, worker_id: str | None = None
) -> tuple[Worker, list[uuid.UUID]]:
    """A worker (its session begun, if it keeps one) whose executor holds ``runs`` new runs of
    ``project``, claimed one by one (no handler runs), in run id order: a heartbeat's view."""
    w = build_worker(
        db=db, settings=settings, handler=handlers.journaled, concurrency=runs, worker_id=worker_id
    ).worker
    await w.heartbeat.open(asyncio.Event())
    run_ids = sorted(await create_runs(db, project, runs))
    for run_id in run_ids:
        sent = time.monotonic()
        state = await db.in_tenant(
            project, lambda c, r=run_id: leases.claim(c, r, w.worker_id, settings.claim_ttl_s)
        )
        assert state is not None
        w.executor.begin(state, sent)
    return w, run_ids
