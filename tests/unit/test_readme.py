"""The README documents every name users and scripts depend on.

Environment variables (Settings), metric names (awooop.core.metrics), CLI commands and
subcommands (the argparse tree) and HTTP routes (the Starlette app) are read from the code,
so a name added without its README line fails here.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import msgspec
import prometheus_client
import pytest

from awooop.cli import build_parser
from awooop.core import metrics
from awooop.core.config import Settings, env_name

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_every_environment_variable_is_documented() -> None:
    missing = [
        env_name(f.name)
        for f in msgspec.structs.fields(Settings)
        if f"`{env_name(f.name)}`" not in README
    ]
    assert missing == []


def test_every_metric_is_documented() -> None:
    names = [
        m._name
        for m in vars(metrics).values()
        if isinstance(m, prometheus_client.metrics.MetricWrapperBase)
    ]
    assert names
    missing = [n for n in names if n not in README]
    assert missing == []


def _commands(parser: argparse.ArgumentParser, prefix: str = "awooop") -> list[str]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.append(f"{prefix} {name}")
                found.extend(_commands(sub, f"{prefix} {name}"))
    return found


def test_every_cli_command_is_documented() -> None:
    commands = _commands(build_parser())
    assert "awooop migrate" in commands
    missing = [c for c in commands if f"`{c}" not in README]
    assert missing == []


@pytest.mark.parametrize("module_name", __import__("awooop.http.app").http.app.ROUTE_MODULES)
def test_every_http_route_is_documented(module_name: str) -> None:
    import importlib

    from awooop.core.config import load_settings
    from awooop.services import Services
    from streams.keys import Keys

    settings = load_settings(environ={})
    # Route tables are built without touching the clients, so none are opened here.
    offline = Services(
        settings=settings,
        db=None,
        redis=None,  # type: ignore[arg-type]
        keys=Keys(settings.redis_key_prefix, settings.shard_count),
    )
    routes = importlib.import_module(module_name).routes(offline)
    paths = {getattr(r, "path", "") for r in routes}
    missing = [p for p in paths if p and p not in README]
    assert missing == []
