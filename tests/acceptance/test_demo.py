"""`make demo`'s embedded default: with neither local services nor Docker, the demo starts
private Postgres and Redis servers in the project folder and runs the whole scenario."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

SERVICES = re.compile(r"services: embedded \(postgres :(\d+), redis :(\d+)\)")


def listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.timeout(400)
def test_the_demo_on_embedded_servers_ends_with_every_check_ok(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWOOOP_")}
    out = subprocess.run(
        [sys.executable, "-m", "awooop.cli", "demo", "--services", "embedded", "--dir", tmp_path],
        env=env,
        capture_output=True,
        text=True,
        timeout=360,
        check=False,
    )
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-4000:]
    found = SERVICES.search(log)
    assert found is not None, log[:2000]
    ports = [int(p) for p in found.groups()]
    assert {5432, 6379}.isdisjoint(ports)  # not the local services
    assert (tmp_path / ".awooop" / "embedded" / "postgres").is_dir()
    assert (tmp_path / ".awooop" / "embedded" / "redis").is_dir()
    assert "=== AwoooP demo summary ===" in log
    checks = re.findall(r"^\s+\[(ok|FAIL)\] (.+)$", log, re.MULTILINE)
    assert len(checks) == 9 and all(status == "ok" for status, _ in checks), checks
    assert ("ok", "awooop doctor found nothing failing") in checks
    # the processes log in without superuser rights (docs/operations.md, Tenant isolation)
    assert "OK login role awooop_demo_runtime: no superuser, no BYPASSRLS" in log
    assert not any(listening(p) for p in ports)  # the private servers stopped with the demo
