"""The read benchmarks' scratch database and server (``console.py``, ``tenant_reads.py``): a
migrated database on AWOOOP_BENCH_PG_URL (default: the local server), dropped at the end, the
``awooop serve`` started on it, and the JSON report written to ``results/<name>-<time>.json``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from awooop.core.migrate import migrate
from awooop.demo.servers import free_port

SERVER = os.environ.get("AWOOOP_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS = os.environ.get("AWOOOP_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
RESULTS = Path(__file__).resolve().parent / "results"


def url_for(name: str) -> str:
    return SERVER.rsplit("/", 1)[0] + "/" + name


def report(result: dict[str, Any], name: str) -> None:
    """Print ``result`` as JSON and keep it in ``results/<name>-<time>.json``."""
    text = json.dumps(result, indent=2)
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H%M")
    (RESULTS / f"{name}-{stamp}.json").write_text(text + "\n")
    print(text)


class Scratch:
    """A migrated scratch database of the benchmark, and the ``awooop serve`` it starts on it;
    both gone when the ``async with`` block ends."""

    def __init__(self, kind: str) -> None:
        self.name = f"awooop_bench_{kind}_{uuid.uuid4().hex[:8]}"
        self.url = url_for(self.name)
        self.proc: subprocess.Popen[bytes] | None = None

    async def __aenter__(self) -> Scratch:
        await migrate(self.url)
        return self

    async def serve(self) -> str:
        """Start ``awooop serve`` on the database; its base URL."""
        self.proc, base = await start_server(self.url, self.name)
        return base

    async def __aexit__(self, *_exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        server = await asyncpg.connect(SERVER)
        try:
            await server.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        finally:
            await server.close()


async def start_server(url: str, prefix: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {
        **os.environ,
        "AWOOOP_DATABASE_URL": url,
        "AWOOOP_REDIS_URL": REDIS,
        "AWOOOP_REDIS_KEY_PREFIX": prefix,
        "AWOOOP_LOG_LEVEL": "warning",
    }
    exe = Path(sys.executable).with_name("awooop")
    argv = [str(exe), "serve", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(argv, env=env)  # noqa: ASYNC220 - started once, before timing
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    async with httpx.AsyncClient() as http:
        while True:
            try:
                if (await http.get(base + "/readyz")).status_code == 200:
                    return proc, base
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError("awooop serve did not become ready")
            await asyncio.sleep(0.2)
