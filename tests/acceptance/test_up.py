"""`awooop up`: server, loops and workers in one process take a webhook to COMPLETED."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests.support.services import free_port


@pytest.mark.connections(25)
def test_up_runs_an_event_to_completion_and_stops_cleanly(
    database_url: str, redis_server_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "AWOOOP_DATABASE_URL": database_url,
        "AWOOOP_REDIS_URL": redis_server_url,
        "AWOOOP_REDIS_KEY_PREFIX": redis_prefix,
        "AWOOOP_SHUTDOWN_GRACE_S": "3",
        "AWOOOP_RELAY_POLL_INTERVAL_S": "0.2",
        "AWOOOP_HTTP_DB_POOL_SIZE": "4",
    }

    def create_token(*how: str) -> str:
        return (
            subprocess.run(
                [sys.executable, "-m", "awooop.cli", "tokens", "create", "p-up", *how],
                env=env,
                capture_output=True,
                text=True,
                check=True,
                timeout=60,
            )
            .stdout.strip()
            .splitlines()[0]
        )

    token = create_token("--channel", "api")
    manage = create_token("--scope", "manage")  # reading a run is a management route
    port = free_port()
    log = tmp_path / "up.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "awooop.cli", "up", "--workers", "2", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert process.poll() is None, log.read_text()[-3000:]
            time.sleep(0.2)
        headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": str(uuid.uuid4())}
        answer = httpx.post(
            f"{base}/v1/projects/p-up/channels/api",
            headers=headers,
            json={"text": "hello from up"},
            timeout=10,
        )
        assert answer.status_code == 202, answer.text
        run_id = answer.json()["run_ids"][0]
        status = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and status != "COMPLETED":
            got = httpx.get(
                f"{base}/v1/projects/p-up/runs/{run_id}",
                headers={"Authorization": f"Bearer {manage}"},
                timeout=5,
            )
            status = got.json().get("status") if got.status_code == 200 else None
            time.sleep(0.2)
        assert status == "COMPLETED", log.read_text()[-3000:]
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=60)
    assert code == 0, log.read_text()[-3000:]
