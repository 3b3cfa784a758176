"""docs/reference.md documents every name users and scripts depend on.

Environment variables (Settings), metric names (awooop.core.metrics), CLI commands and
subcommands (the argparse tree) and HTTP routes (the Starlette app) are read from the code, and
each must name a row of one of the reference's tables (its first cell), so a name added without
its row fails here, and so does a row taken away while the name is still mentioned elsewhere.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import re
from pathlib import Path

import msgspec
import prometheus_client
import pytest

from awooop.cli import build_parser
from awooop.core import metrics
from awooop.core.config import Settings, env_name
from awooop.http.app import ROUTE_MODULES

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference.md"
CODE_SPAN = re.compile(r"`([^`]+)`")


def row_names() -> list[str]:
    """The code spans of the first cell of every table row (header and rule rows included:
    they hold none)."""
    names: list[str] = []
    for line in REFERENCE.read_text().splitlines():
        if line.startswith("| "):
            first_cell = re.split(r"(?<!\\) \| ", line[2:], maxsplit=1)[0]
            names.extend(CODE_SPAN.findall(first_cell))
    return names


def test_every_environment_variable_has_a_row() -> None:
    documented = set(row_names())
    missing = [
        env_name(f.name)
        for f in msgspec.structs.fields(Settings)
        if env_name(f.name) not in documented
    ]
    assert missing == []


def test_every_metric_has_a_row() -> None:
    documented = set(row_names())
    found = [m for m in vars(metrics).values() if isinstance(m, prometheus_client.Counter)]
    others = [
        m
        for m in vars(metrics).values()
        if isinstance(m, prometheus_client.metrics.MetricWrapperBase) and m not in found
    ]
    # A counter is exposed (and documented) with its _total suffix.
    names = [f"{m._name}_total" for m in found] + [m._name for m in others]
    assert found and others
    missing = [n for n in names if n not in documented]
    assert missing == []


def _commands(parser: argparse.ArgumentParser, prefix: str = "awooop") -> list[str]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.append(f"{prefix} {name}")
                found.extend(_commands(sub, f"{prefix} {name}"))
    return found


def documented_commands() -> set[str]:
    """Every command a row's synopsis names: `awooop runs show\\|cancel ID` names
    `awooop runs show` and `awooop runs cancel` (and each shorter prefix)."""
    commands: set[str] = set()
    for synopsis in row_names():
        words = synopsis.split()
        if words[:1] != ["awooop"]:
            continue
        choices = [word.split("\\|") for word in words]
        for length in range(1, len(words) + 1):
            for combination in itertools.product(*choices[:length]):
                commands.add(" ".join(combination))
    return commands


def test_every_cli_command_has_a_row() -> None:
    commands = _commands(build_parser())
    assert "awooop migrate" in commands
    documented = documented_commands()
    missing = [c for c in commands if c not in documented]
    assert missing == []


def documented_paths() -> set[str]:
    """The path of every `METHOD /path` a row names."""
    return {
        span.split()[1] for span in row_names() if re.fullmatch(r"[A-Z]+ /\S*", span) is not None
    }


@pytest.mark.parametrize("module_name", ROUTE_MODULES)
def test_every_http_route_has_a_row(module_name: str) -> None:
    from awooop.core.config import load_settings
    from awooop.services import Services
    from awooop.streams.keys import Keys

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
    assert paths
    missing = [p for p in paths if p and p not in documented_paths()]
    assert missing == []
