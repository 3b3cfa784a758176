"""`make demo`'s embedded default, as an operator runs it from the wheel: this checkout's wheel
installed in a fresh virtual environment (tests/support/wheels.py), its ``awooop demo`` run in a
project folder outside the checkout. With neither local services nor Docker, the demo starts
private Postgres and Redis servers in the project folder and runs the whole scenario. Every
process of it runs the wheel's code: the folder has ``streams`` and ``projections`` packages of
its own that fail on import (a service's project may well have such folders).

Its processes export traces (OTLP) to a local receiver with the default settings: loop
iterations (sampled at ``AWOOOP_LOOP_TRACE_SAMPLE_RATIO``, default 0.01; failed ones always
kept) are few, and resources carry the service version, instance and host."""

from __future__ import annotations

import re
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.otlp import decode
from tests.support.scripts import ROOT
from tests.support.wheels import clean_env, installed_wheel, package_file

ERROR = 2  # opentelemetry.proto.trace.v1.Status.STATUS_CODE_ERROR
SERVICES = re.compile(r"services: embedded \(postgres :(\d+), redis :(\d+)\)")


def listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def folder_packages_that_fail(folder: Path) -> None:
    for name in ("streams", "projections"):
        (folder / name).mkdir()
        (folder / name / "__init__.py").write_text(
            f"raise ImportError('the project folder\\'s own {name} package was imported')\n"
        )


@pytest.mark.long(40)
@pytest.mark.timeout(480)  # building the wheel when the sources changed, then the demo
def test_the_demo_of_an_installed_wheel_on_embedded_servers_ends_with_every_check_ok(
    tmp_path: Path, collector: Any
) -> None:
    bin_dir = installed_wheel()
    assert not tmp_path.is_relative_to(ROOT)  # a project folder outside the checkout
    folder_packages_that_fail(tmp_path)
    assert package_file(bin_dir, tmp_path).startswith(str(bin_dir.parent))  # not the checkout
    env = {k: v for k, v in clean_env().items() if not k.startswith("OTEL_")}
    env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = collector.url
    began = time.monotonic()
    out = subprocess.run(
        [str(bin_dir / "awooop"), "demo", "--services", "embedded", "--dir", str(tmp_path)],
        cwd=tmp_path,
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
    assert len(checks) == 11 and all(status == "ok" for status, _ in checks), checks
    assert ("ok", "awooop doctor found nothing failing") in checks
    assert any(name.startswith("the triage agent: ") for _, name in checks), checks
    assert any(name.startswith("orders from a psycopg service: ") for _, name in checks), checks
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
