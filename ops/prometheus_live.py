"""What the live alert checks share (``ops/check_alerts_live.py``, ``ops/check_alerts_quiet.py``):
a scratch database and Redis prefix, AwoooP processes and a real Prometheus started with the
shipped rules, its HTTP API, and the clean-up."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis

from awooop.demo.servers import free_port

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "ops" / "prometheus" / "rules"
CLI = [sys.executable, "-m", "awooop.cli"]


def report(result: dict[str, Any]) -> int:
    """Print the check's JSON result; its exit code (0 when ``ok``)."""
    print(json.dumps(result, indent=2))
    return 0 if result["ok"] else 1


def wait_for(what: str, check: Callable[[], Any], timeout_s: float, every_s: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every_s)
    raise SystemExit(f"timed out after {timeout_s:g} s waiting for {what}")


def api(prom: str, path: str, key: str, params: Mapping[str, str] | None = None) -> list[Any]:
    """``data[key]`` of a Prometheus API answer, or nothing while Prometheus does not answer (or
    is starting: it answers 503 with a text body then)."""
    try:
        answer = httpx.get(f"{prom}{path}", params=params, timeout=5)
        found: list[Any] = answer.json()["data"][key]
    except (httpx.HTTPError, ValueError, KeyError):
        return []
    return found


def query(prom: str, expr: str) -> list[dict[str, Any]]:
    return api(prom, "/api/v1/query", "result", {"query": expr})


def alerts(prom: str) -> list[dict[str, Any]]:
    """Pending and firing alerts."""
    return api(prom, "/api/v1/alerts", "alerts")


def firing(prom: str) -> list[dict[str, Any]]:
    return [a for a in alerts(prom) if a["state"] == "firing"]


@dataclass
class Scratch:
    """A fresh database on ``pg`` and Redis key prefix on ``redis_url``, the processes started on
    them, and the clean-up of all three."""

    pg: str
    redis_url: str
    work: Path
    name: str = field(default_factory=lambda: f"awooop_check_{uuid.uuid4().hex[:8]}")
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "AWOOOP_DATABASE_URL": f"{self.pg}/{self.name}",
            "AWOOOP_REDIS_URL": self.redis_url,
            "AWOOOP_REDIS_KEY_PREFIX": self.name,
            "AWOOOP_SHUTDOWN_GRACE_S": "3",
        }

    def migrate(self) -> None:
        subprocess.run(
            [*CLI, "migrate"], env=self.env, check=True, timeout=300, capture_output=True
        )

    def start(
        self, command: list[str], log: str, env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        with (self.work / log).open("w") as out:
            process = subprocess.Popen(
                command, env={**self.env, **(env or {})}, stdout=out, stderr=subprocess.STDOUT
            )
        self.processes.append(process)
        return process

    def prometheus(self, binary: str, interval: float, jobs: Mapping[str, list[str]]) -> str:
        """Prometheus scraping ``jobs`` (name: targets) every ``interval`` seconds with the
        shipped rules evaluated as often; its URL."""
        config = {
            "global": {
                "scrape_interval": f"{interval:g}s",
                "evaluation_interval": f"{interval:g}s",
            },
            "rule_files": [str(path) for path in sorted(RULES.glob("*.yml"))],
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": targets}]}
                for job, targets in jobs.items()
            ],
        }
        (self.work / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
        port = free_port()
        self.start(
            [
                binary,
                f"--config.file={self.work / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.work / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            "prometheus.log",
        )
        return f"http://127.0.0.1:{port}"

    def __enter__(self) -> Scratch:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)  # a frozen one must hear the SIGTERM
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
        subprocess.run(
            [
                "psql",
                f"{self.pg}/postgres",
                "-qc",
                f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)",
            ],
            check=False,
            timeout=60,
        )
        client = redis.Redis.from_url(self.redis_url)
        for key in client.scan_iter(match=f"{self.name}*", count=1000):
            client.delete(key)
        client.close()
