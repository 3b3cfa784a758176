"""ops/: alert rules pass promtool, dashboards and rules use real metrics, docs list them all.

promtool comes from Debian's prometheus package (ops/install-prometheus.sh; make test installs it):
in CI a missing promtool fails the test, elsewhere it is skipped with the command to run.
``docker compose config`` runs where a compose client exists (it needs no engine).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from awooop.core import metrics
from tests.support.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
OPS = ROOT / "ops"
RULES = OPS / "prometheus" / "rules" / "awooop.rules.yml"
RULE_TESTS = OPS / "prometheus" / "tests" / "awooop.rules.test.yml"
METRIC_NAME = re.compile(r"\bawooop_[a-z0-9_]+\b")


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        message = "promtool missing: run ops/install-test-deps.sh (make test does)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)


def catalog() -> dict[str, set[str]]:
    """Every metric of awooop/core/metrics.py: name -> the sample names Prometheus sees."""
    found: dict[str, set[str]] = {}
    for value in vars(metrics).values():
        if isinstance(value, MetricWrapperBase):
            name, kind = value._name, value._type
            samples = {
                "counter": {f"{name}_total"},
                "histogram": {f"{name}_bucket", f"{name}_sum", f"{name}_count"},
            }.get(kind, {name})
            found[f"{name}_total" if kind == "counter" else name] = samples
    return found


def sample_names() -> set[str]:
    return set().union(*catalog().values())


def test_promtool_checks_the_rules() -> None:
    result = run(promtool(), "check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_unit_tests_of_the_rules_pass() -> None:
    result = run(promtool(), "test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_checks_the_prometheus_config() -> None:
    result = run(promtool(), "check", "config", str(OPS / "prometheus" / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


def alert_rules() -> dict[str, dict[str, Any]]:
    rules = yaml.safe_load(RULES.read_text())
    return {r["alert"]: r for g in rules["groups"] for r in g["rules"]}


def test_every_alert_has_a_promtool_case_where_it_fires() -> None:
    alerts = alert_rules()
    required = {
        "ProcessDown",
        "BackgroundLoopStale",
        "BackgroundLoopFailing",
        "OutboxLagHigh",
        "ConsumerGroupLagHigh",
        "DeadLetters",
        "RunsStuck",
    }
    assert required <= set(alerts)
    fired = {
        t["alertname"]
        for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for t in case["alert_rule_test"]
        if t["exp_alerts"]
    }
    assert set(alerts) <= fired, f"alerts no promtool case sees firing: {set(alerts) - fired}"


def test_staleness_and_dead_letters_do_not_depend_on_the_process_they_judge() -> None:
    """A stopped process's series vanish and a crash-looping worker never shows its counter:
    the loop alerts keep the last value (last_over_time), the outbox alerts read the stats
    loop's measure from Postgres, and so do dead letters (awooop_dead_letters)."""
    alerts = alert_rules()
    assert (
        "last_over_time(awooop_background_loop_last_run_timestamp["
        in (alerts["BackgroundLoopStale"]["expr"])
    )
    for name in ("OutboxLagHigh", "OutboxLagCritical"):
        assert "awooop_outbox_backlog_seconds" in alerts[name]["expr"]
    assert "awooop_dead_letters_open" in alerts["DeadLetters"]["expr"]


def test_every_scraped_awooop_job_has_a_rule_on_its_absence() -> None:
    config = yaml.safe_load((OPS / "prometheus" / "prometheus.yml").read_text())
    jobs = {j["job_name"] for j in config["scrape_configs"] if j["job_name"].startswith("awooop")}
    alerts = alert_rules()
    assert 'up{job=~"awooop-.*"}' in alerts["ProcessDown"]["expr"]
    assert 'process_start_time_seconds{job=~"awooop-.*"}' in alerts["ProcessRestarting"]["expr"]
    absent = set(re.findall(r'absent\(up\{job="([^"]+)"\}\)', alerts["JobAbsent"]["expr"]))
    assert absent == jobs


def runbook_entries() -> list[str]:
    doc = (ROOT / "docs" / "operations.md").read_text()
    runbook = doc[doc.index("\n## Runbook") :]
    runbook = runbook[: runbook.find("\n## ", 1) if "\n## " in runbook[1:] else None]
    return re.findall(r"^### `([A-Za-z]+)`", runbook, flags=re.MULTILINE)


def test_every_alert_has_a_runbook_entry_of_the_same_name() -> None:
    alerts = alert_rules()
    entries = runbook_entries()
    assert sorted(entries) == sorted(alerts), (
        f"no entry: {set(alerts) - set(entries)}; no alert: {set(entries) - set(alerts)}"
    )
    for name, rule in alerts.items():  # the page itself says where to look
        assert f"runbook entry {name}" in rule["annotations"]["description"], name


def test_the_docs_name_only_alerts_that_exist() -> None:
    alerts = alert_rules()
    seen = 0
    for path in (
        ROOT / "README.md",
        ROOT / "docs" / "operations.md",
        ROOT / "docs" / "reference.md",
    ):
        named = re.findall(r"\balerts? `([^`]+)`", path.read_text())
        named += re.findall(r"\balerts? `[^`]+`\s+(?:and|or|/)\s+`([^`]+)`", path.read_text())
        unknown = [n for n in named if n not in alerts]
        assert not unknown, f"{path.name} names unknown alerts: {unknown}"
        seen += len(named)
    assert seen >= 3  # operations.md's situations name alerts this way


def test_rules_use_only_metrics_that_exist() -> None:
    rules = yaml.safe_load(RULES.read_text())
    used = {m for g in rules["groups"] for r in g["rules"] for m in METRIC_NAME.findall(r["expr"])}
    assert used and used <= sample_names(), used - sample_names()


def load_builder() -> Any:
    return load_script("ops/grafana/build_dashboards.py", "build_dashboards")


def test_dashboards_are_built_from_their_description_and_use_real_metrics() -> None:
    builder = load_builder()
    files = builder.rendered()
    assert {p.name for p in files} == {"runs.json", "lag.json", "loops.json", "revisions.json"}
    for path, text in files.items():
        assert path.exists() and path.read_text() == text, (
            f"{path.name} is out of date: python ops/grafana/build_dashboards.py"
        )
        board = json.loads(path.read_text())
        assert board["uid"] and board["title"].startswith("AwoooP") and board["panels"]
        exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
        used = {m for e in exprs for m in METRIC_NAME.findall(e)}
        assert used <= sample_names(), f"{path.name}: unknown metrics {used - sample_names()}"


def test_every_metric_is_on_a_dashboard_and_documented() -> None:
    boards = " ".join(p.read_text() for p in (OPS / "grafana" / "dashboards").glob("*.json"))
    on_boards = set(METRIC_NAME.findall(boards))
    doc = (ROOT / "docs" / "reference.md").read_text()
    missing_docs = [name for name in catalog() if f"`{name}`" not in doc]
    assert not missing_docs, f"document these metrics in docs/reference.md: {missing_docs}"
    missing_boards = [n for n, samples in catalog().items() if not samples & on_boards]
    assert not missing_boards, f"put these metrics on a dashboard: {missing_boards}"


def test_grafana_reads_prometheus_and_tempo() -> None:
    provisioning = OPS / "grafana" / "provisioning"
    sources = yaml.safe_load((provisioning / "datasources" / "datasources.yaml").read_text())
    types = {d["type"]: d["url"] for d in sources["datasources"]}
    assert types == {"prometheus": "http://prometheus:9090", "tempo": "http://tempo:3200"}
    providers = yaml.safe_load((provisioning / "dashboards" / "dashboards.yaml").read_text())
    assert providers["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"


def test_compose_has_the_stack() -> None:
    compose = yaml.safe_load((OPS / "compose.yaml").read_text())
    services = compose["services"]
    expected = {"postgres", "redis", "tempo", "prometheus", "grafana", "awooop-loops"}
    assert expected | {"awooop-relay"} <= set(services)
    loops = services["awooop-loops"]
    # The relay runs apart, a leader and a standby; the loops process runs everything else.
    assert loops["command"] == ["awooop", "loops", "run", "--skip", "relay"]
    relay = services["awooop-relay"]
    assert relay["command"] == ["awooop", "relay"] and relay["deploy"]["replicas"] == 2
    assert loops["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://tempo:4318"
    assert loops["environment"]["AWOOOP_METRICS_PORT"] == "9100"
    mounts = " ".join(services["grafana"]["volumes"])
    assert "provisioning" in mounts and "dashboards" in mounts
    volumes = [v for s in services.values() for v in s.get("volumes", [])]
    for relative in [v.split(":")[0] for v in volumes if v.startswith("./")]:
        assert (OPS / relative).exists(), relative


def compose_command() -> list[str] | None:
    if shutil.which("docker") and run("docker", "compose", "version").returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def test_docker_compose_accepts_the_file() -> None:
    command = compose_command()
    if command is None:
        pytest.skip("no docker compose client on this machine")
    result = run(*command, "-f", str(OPS / "compose.yaml"), "config", "--quiet")
    assert result.returncode == 0, result.stderr
