"""A healthy scale-out fleet (serve, two workers, two relays, loops, projector) scraped by a real
Prometheus with the shipped rules: no alert becomes pending or fires while runs flow
(ops/check_alerts_quiet.py; twenty minutes is its manual run, this one watches for 60 s,
which a rule true on a healthy fleet shows as pending at once)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.services import private_postgres

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.long(80)
def test_a_healthy_fleet_pages_nobody(redis_server_url: str) -> None:
    if shutil.which("prometheus") is None:
        message = "prometheus missing: run ops/install-test-deps.sh (make test does)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    # A private Postgres server: the fleet's seven processes and their pools must not compete with
    # the rest of the suite for connections (a refused connection would be a false page).
    with private_postgres() as pg:
        result = run_check(pg.url.rsplit("/", 1)[0], redis_server_url)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    report = json.loads(result.stdout[result.stdout.index("{") :])
    assert report["ok"] and report["runs_submitted"] > 0 and report["runs_unfinished"] == 0
    assert report["alerts_pending_or_firing"] == []


def run_check(server: str, redis_url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "ops" / "check_alerts_quiet.py"),
            "--minutes",
            "1",
            "--pg",
            server,
            "--redis",
            redis_url,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=ROOT,
    )
