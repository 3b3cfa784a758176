"""The real thing: `awooop channels` / `awooop tokens` and an `awooop serve` subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.support.services import free_port
from tests.support.webhooks import PROJECT, SECRETS, fresh, sign


def cli(
    env: dict[str, str], *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "awooop.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


@pytest.fixture
def env(database_url: str, redis_server_url: str, redis_prefix: str) -> dict[str, str]:
    return {
        **os.environ,
        "AWOOOP_DATABASE_URL": database_url,
        "AWOOOP_REDIS_URL": redis_server_url,
        "AWOOOP_REDIS_KEY_PREFIX": redis_prefix,
        "AWOOOP_HTTP_DB_POOL_SIZE": "4",
        "AWOOOP_SHUTDOWN_GRACE_S": "5",
    }


@contextmanager
def serve(
    env: dict[str, str], log: Path, *args: str
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    port = free_port()
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "awooop.cli", "serve", "--port", str(port), *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"awooop serve did not start: {log.read_text()}")
            time.sleep(0.1)
        yield process, url
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def provision(env: dict[str, str]) -> dict[str, str]:
    creds: dict[str, str] = {}
    for channel, secret in SECRETS.items():
        if channel == "line":  # from stdin: the secret stays out of argv
            result = cli(env, "channels", "set-secret", PROJECT, channel, "-", stdin=secret + "\n")
        else:
            result = cli(env, "channels", "set-secret", PROJECT, channel, secret)
        assert result.returncode == 0, result.stderr
        assert secret not in result.stdout + result.stderr
        creds[channel] = secret
    for channel in ("api", "alertmanager"):
        result = cli(env, "tokens", "create", PROJECT, "--channel", channel)
        assert result.returncode == 0, result.stderr
        creds[channel] = result.stdout.strip()
        assert creds[channel].startswith("awp_") and "\n" not in creds[channel]
    result = cli(env, "tokens", "create", PROJECT, "--scope", "manage")
    assert result.returncode == 0, result.stderr
    creds["manage"] = result.stdout.strip()
    return creds


def test_cli_refusals_are_one_line_errors(env: dict[str, str]) -> None:
    result = cli(env, "channels", "set-secret", PROJECT, "api", "x")
    assert result.returncode == 1
    assert result.stderr.startswith("error E-INPUT-001: channel api authenticates with a bearer")
    result = cli(env, "channels", "set-secret", PROJECT, "slack", "x")
    assert (result.returncode, result.stderr.split(":")[0]) == (1, "error E-CHANNEL-001")
    result = cli(env, "channels", "set-secret", PROJECT, "telegram", "has spaces")
    assert (result.returncode, result.stderr.split(":")[0]) == (1, "error E-INPUT-001")
    for option in (
        ("line", "gitea_key", "body"),
        ("line", "max_event_age_s", "0"),
        ("gitea", "gitea_key", "hash"),
        ("line", "nonsense", "1"),
    ):
        result = cli(env, "channels", "set-option", PROJECT, *option)
        assert (result.returncode, result.stderr.split(":")[0]) == (1, "error E-INPUT-001")
    result = cli(env, "tokens", "revoke", PROJECT, "0123456789abcdef")
    assert (result.returncode, result.stderr.split(":")[0]) == (1, "error E-INPUT-001")
    result = cli(env, "tokens", "create", PROJECT, "--scope", "admin")
    assert result.stderr.startswith("error E-INPUT-001: an admin token belongs to the platform")
    result = cli(env, "tokens", "create", PROJECT, "--scope", "manage", "--channel", "api")
    assert (result.returncode, result.stderr.split(":")[0]) == (1, "error E-INPUT-001")
    result = cli(env, "tokens", "create", PROJECT)
    assert result.stderr.startswith("error E-INPUT-001: an ingest token names its channel")
    result = cli(env, "tokens", "create", "__platform__", "--scope", "admin")
    assert result.returncode == 0 and result.stdout.startswith("awp_"), result.stderr
    assert "admin" in cli(env, "tokens", "list", "__platform__").stdout


def test_serve_ingests_every_channel_and_stops_cleanly(env: dict[str, str], tmp_path: Path) -> None:
    creds = provision(env)
    result = cli(env, "channels", "set-option", PROJECT, "line", "max_event_age_s", "600")
    assert result.stdout.strip() == f"max_event_age_s of {PROJECT}/line set to 600"
    listed = cli(env, "channels", "list", PROJECT)
    assert listed.returncode == 0 and "telegram" in listed.stdout
    options = {line.split()[0]: line.split()[-2:] for line in listed.stdout.splitlines()[1:]}
    assert options["line"] == ["max_event_age_s=600", "max_redelivery_age_s=86400*"]
    assert options["gitea"][-1] == "gitea_key=body*"
    assert all(secret not in listed.stdout for secret in SECRETS.values())
    tokens = cli(env, "tokens", "list", PROJECT)
    scopes = [line.split()[1] for line in tokens.stdout.splitlines()[1:]]
    assert sorted(scopes) == ["ingest", "ingest", "manage"]
    assert all(creds[c] not in tokens.stdout for c in ("api", "alertmanager", "manage"))

    log = tmp_path / "serve.log"
    with serve(env, log) as (process, url):
        assert httpx.get(f"{url}/readyz").json()["status"] == "ok"

        async def drive() -> None:
            async with httpx.AsyncClient(base_url=url, timeout=30) as client:
                for channel in ("telegram", "alertmanager", "gitea", "line", "api"):
                    delivery = sign(fresh(channel), creds[channel])
                    first = await client.post(
                        delivery.path, content=delivery.body, headers=delivery.headers
                    )
                    assert first.status_code == 202, first.text
                    repeat = await client.post(
                        delivery.path, content=delivery.body, headers=delivery.headers
                    )
                    assert repeat.status_code == 200
                    assert repeat.json()["code"] == "E-IDEMPOTENT-001"
                    assert repeat.json()["run_ids"] == first.json()["run_ids"]

                # 100 concurrent identical deliveries through the real server.
                delivery = sign(fresh("api"), creds["api"])
                responses = await asyncio.gather(
                    *(
                        client.post(delivery.path, content=delivery.body, headers=delivery.headers)
                        for _ in range(100)
                    )
                )
                assert sorted(r.status_code for r in responses) == [200] * 99 + [202]
                (run_id,) = {r.json()["run_ids"][0] for r in responses}

                auth = {"Authorization": f"Bearer {creds['manage']}"}
                run = await client.get(f"/v1/projects/{PROJECT}/runs/{run_id}", headers=auth)
                assert (run.status_code, run.json()["status"]) == (200, "PENDING")
                ingest_auth = {"Authorization": f"Bearer {creds['api']}"}
                run = await client.get(f"/v1/projects/{PROJECT}/runs/{run_id}", headers=ingest_auth)
                assert (run.status_code, run.json()["code"]) == (403, "E-AUTH-003")

                big = sign(fresh("api"), creds["api"])
                big.payload["padding"] = "x" * (1024 * 1024)
                sign(big, creds["api"])
                response = await client.post(big.path, content=big.body, headers=big.headers)
                assert (response.status_code, response.json()["code"]) == (413, "E-INPUT-003")
                bad = sign(fresh("gitea"), "wrong secret")
                response = await client.post(bad.path, content=bad.body, headers=bad.headers)
                assert (response.status_code, response.json()["code"]) == (401, "E-AUTH-001")
                response = await client.post(f"/v1/projects/{PROJECT}/channels/slack")
                assert (response.status_code, response.json()["code"]) == (404, "E-CHANNEL-001")
                response = await client.get("/nowhere")
                assert (response.status_code, response.json()["code"]) == (404, "E-HTTP-404")

                metrics = (await client.get("/metrics")).text
                assert 'awooop_ingest_events_total{channel_type="api",outcome="created"}' in (
                    metrics
                )
                assert (
                    'awooop_ingest_events_total{channel_type="api",outcome="duplicate"} 100.0'
                    in (metrics)
                )

        asyncio.run(drive())
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    output = log.read_text()
    for secret in [*SECRETS.values(), creds["api"], creds["alertmanager"]]:
        assert secret not in output
    assert '"event": "serve_stopped"' in output


def test_serve_with_two_workers_shares_the_port(env: dict[str, str], tmp_path: Path) -> None:
    result = cli(env, "channels", "set-secret", PROJECT, "telegram", SECRETS["telegram"])
    assert result.returncode == 0, result.stderr
    creds = dict(SECRETS)
    log = tmp_path / "serve.log"
    with serve(env, log, "--workers", "2") as (process, url):
        for _ in range(20):
            with httpx.Client(base_url=url) as client:  # a new connection each time
                delivery = sign(fresh("telegram"), creds["telegram"])
                response = client.post(
                    delivery.path, content=delivery.body, headers=delivery.headers
                )
                assert response.status_code == 202
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    events = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    started = {e["pid"] for e in events if e["event"] == "serve_started"}
    stopped = {e["pid"] for e in events if e["event"] == "serve_stopped"}
    assert len(started) == 2 and stopped == started
