"""The ``awooop`` command line: one subcommand module per concern under awooop/commands/.

Errors from the catalog print one line (``error E-XXX-NNN: message``) and exit 1, never a
traceback; interrupting with Ctrl-C exits 130.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import re
import sys
from collections.abc import Sequence

from awooop.core.config import Settings, load_settings
from awooop.core.errors import AwoooPError
from awooop.core.logs import configure_logging

# Each module defines register(subparsers) and sets args.run = async fn(settings, args) -> int.
COMMAND_MODULES = (
    "awooop.commands.migrate",
    "awooop.commands.smoke",
    "awooop.commands.serve",
    "awooop.commands.channels",
    "awooop.commands.tokens",
    "awooop.commands.tenants",
    "awooop.commands.loops",
    "awooop.commands.relay",
    "awooop.commands.revisions",
    "awooop.commands.worker",
    "awooop.commands.runs",
    "awooop.commands.deadletters",
    "awooop.commands.replay",
    "awooop.commands.projector",
    "awooop.commands.demo",
    "awooop.commands.up",
    "awooop.commands.doctor",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="awooop", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        module = importlib.import_module(name)
        module.register(subparsers)
        describe(subparsers, module.__doc__ or "")
    return parser


def describe(subparsers: argparse._SubParsersAction, doc: str) -> None:  # type: ignore[type-arg]  # argparse's own generic
    """Give the commands registered so far a ``--help`` that says what they do: a command
    without a description of its own gets its module's docstring (what it does, its main
    options, how it stops); a subcommand without one gets its one-line help."""
    for sub in subparsers.choices.values():
        if not sub.description and doc:
            sub.description = _plain(doc)
            sub.formatter_class = argparse.RawDescriptionHelpFormatter
        for action in sub._actions:
            if isinstance(action, argparse._SubParsersAction):
                helps = {a.dest: a.help for a in action._choices_actions}
                for child_name, child in action.choices.items():
                    if not child.description:
                        child.description = helps.get(child_name)


def _plain(doc: str) -> str:
    """A module docstring as help text: reST literals (``x``) and roles (:mod:`x`) plain."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", doc)
    return text.replace("``", "").strip()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings: Settings = load_settings()
        configure_logging(settings.log_level)
        # A command may choose its event loop (serve runs on uvloop) with args.loop_factory.
        with asyncio.Runner(loop_factory=getattr(args, "loop_factory", None)) as runner:
            code: int = runner.run(args.run(settings, args))
    except AwoooPError as exc:
        print(f"error {exc.code}: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
