"""`make demo`'s embedded default: with neither local services nor Docker, the demo starts
private Postgres and Redis servers in the project folder and runs the whole scenario.

Its processes export traces (OTLP) to a local receiver with the default settings: loop
iterations (sampled at ``AWOOOP_LOOP_TRACE_SAMPLE_RATIO``, default 0.01; failed ones always
kept) are few, and resources carry the service version, instance and host."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.otlp import decode

ERROR = 2  # opentelemetry.proto.trace.v1.Status.STATUS_CODE_ERROR
SERVICES = re.compile(r"services: embedded \(postgres :(\d+), redis :(\d+)\)")


def listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.timeout(400)
def test_the_demo_on_embedded_servers_ends_with_every_check_ok(
    tmp_path: Path, collector: Any
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWOOOP_", "OTEL_"))}
    env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = collector.url
    began = time.monotonic()
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
    loop_traces_are_few(collector, time.monotonic() - began)


def loop_traces_are_few(collector: Any, elapsed_s: float) -> None:
    """Loop iterations that succeeded are a few of the exported traces (default settings): at
    most a tenth of them, or, on a slow machine where the demo ran long and its loops went
    round more often, one every two seconds of the demo (100 iterations a second across its
    processes at the 0.01 ratio; without sampling there would be that many a second)."""
    traces: set[bytes] = set()
    loop_traces: set[bytes] = set()
    resources: list[dict[str, str]] = []
    for _path, headers, body in list(collector.requests):
        for resource_spans in decode(headers, body).resource_spans:
            resources.append(
                {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            )
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    traces.add(span.trace_id)
                    if (
                        not span.parent_span_id
                        and span.status.code != ERROR  # failures are kept whatever the ratio
                        and any(a.key == "awooop.loop" for a in span.attributes)
                    ):
                        loop_traces.add(span.trace_id)
    assert len(traces) >= 50, len(traces)  # the webhooks' traces are there
    allowed = max(len(traces) / 10, elapsed_s / 2)
    assert len(loop_traces) <= allowed, (len(loop_traces), len(traces), elapsed_s)
    assert resources and all(
        r.get("service.version") and r.get("service.instance.id") and r.get("host.name")
        for r in resources
    ), resources[:3]
    print(f"exported traces: {len(traces)}, of which loop iterations: {len(loop_traces)}")
