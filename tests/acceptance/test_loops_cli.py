"""``awooop loops run`` and ``awooop loops list`` as real processes (R-40, R-42, R-50, R-51).

One ``loops run`` process with short intervals: its /metrics shows each loop's last-run gauge
advancing, ``loops list`` in another process shows the last runs from Postgres, its loop
spans reach an OTLP endpoint configured by ``OTEL_*`` only, and SIGTERM stops it cleanly.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from typing import Any

import pytest

from awooop.core.config import Settings
from awooop.demo.servers import free_port

LOOPS = ("stats_runs", "stats_outbox", "stats_streams", "relay", "dedupe_expiry")


def env_for(settings: Settings, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWOOOP_", "OTEL_"))}
    env.update(
        AWOOOP_DATABASE_URL=settings.database_url,
        AWOOOP_REDIS_URL=settings.redis_url,
        AWOOOP_REDIS_KEY_PREFIX=settings.redis_key_prefix,
        AWOOOP_STATS_INTERVAL_S="0.2",
        AWOOOP_RELAY_POLL_INTERVAL_S="0.2",
        AWOOOP_DEDUPE_EXPIRY_INTERVAL_S="0.2",
        AWOOOP_SHUTDOWN_GRACE_S="5",
        AWOOOP_LOG_LEVEL="info",
    )
    env.update(extra)
    return env


def awooop(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "awooop.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def scrape(port: int) -> dict[tuple[str, str], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    found: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        if line.startswith("awooop_background_loop_last_run_timestamp{"):
            labels, value = line.rsplit(" ", 1)
            name = labels.split('loop_name="', 1)[1].split('"', 1)[0]
            project = labels.split('project_id="', 1)[1].split('"', 1)[0]
            found[(name, project)] = float(value)
    return found


def wait_scrape(port: int, want: int, deadline: float) -> dict[tuple[str, str], float]:
    # Only the stats loops: other modules of the loop registry (projectors, relay ...) run in
    # the same process with their own intervals.
    while True:
        try:
            found = {k: v for k, v in scrape(port).items() if k[0] in LOOPS}
            if len(found) >= want:
                return found
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError("loops did not report in time")
        time.sleep(0.1)


@pytest.mark.connections(11)
def test_run_serves_metrics_list_reads_heartbeats_sigterm_stops(
    settings: Settings, collector: Any
) -> None:
    assert awooop("migrate", env=env_for(settings)).returncode == 0
    port = free_port()
    env = env_for(
        settings,
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=collector.url,
        OTEL_BSP_SCHEDULE_DELAY="200",
        AWOOOP_LOOP_TRACE_SAMPLE_RATIO="1",  # every iteration: this checks they are exported
    )
    process = subprocess.Popen(
        # Its own loops by name: other areas register loops of their own in the registry.
        [sys.executable, "-m", "awooop.cli", "loops", "run", *LOOPS, "--metrics-port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = wait_scrape(port, len(LOOPS), time.monotonic() + 20)
        assert {name for name, _ in first} == set(LOOPS)
        assert {project for _, project in first} == {"__platform__"}
        # Each loop's gauge advances (every 0.2 s when idle; later on a busy machine).
        deadline = time.monotonic() + 20
        while not all((second := scrape(port))[key] > first[key] for key in first):
            assert time.monotonic() < deadline, (first, second)
            time.sleep(0.2)

        listed = awooop("loops", "list", "--json", env=env_for(settings))
        assert listed.returncode == 0, listed.stderr
        lines = {row["loop"]: row for row in map(json.loads, listed.stdout.splitlines())}
        for name in LOOPS:
            assert lines[name]["category"] == "platform"
            assert lines[name]["project_id"] == "__platform__"
            assert lines[name]["interval_s"] == 0.2
            assert lines[name]["last_run"].endswith("s ago"), lines[name]
            assert lines[name]["where"].endswith(f":{process.pid}")
            assert lines[name]["state"] == "ok", lines[name]
        table = awooop("loops", "list", env=env_for(settings))
        assert table.stdout.splitlines()[0].split()[:4] == [
            "LOOP",
            "CATEGORY",
            "PROJECT",
            "INTERVAL",
        ]

        deadline = time.monotonic() + 10
        while not {s.name for s in collector.spans()} >= {f"loop {n}" for n in LOOPS}:
            assert time.monotonic() < deadline, "no loop spans exported"
            time.sleep(0.1)
        exported = [s for s in collector.spans() if s.name == "loop stats_runs"]
        assert len({s.trace_id for s in exported}) == len(exported)  # a trace per iteration

        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, stderr
    events = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    stopped = [e["loop"] for e in events if e["event"] == "loop_stopped"]
    assert set(LOOPS) <= set(stopped)
    assert events[-1]["event"] == "loops_stopped"
    assert not [e for e in events if e["level"] in ("error", "critical")]


def test_run_refuses_an_unknown_loop(settings: Settings) -> None:
    result = awooop("loops", "run", "no_such_loop", env=env_for(settings))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("error E-LOOP-001: no loop named")
