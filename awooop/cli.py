"""The ``awooop`` command line: one subcommand module per concern under awooop/commands/.

Errors from the catalog print one line (``error E-XXX-NNN: message``) and exit 1, never a
traceback, and so does the database away, refusing, too slow or still in a lock cycle after
a command's own retries (E-DB-001 to E-DB-003); interrupting with Ctrl-C exits 130. Output
into a pipe closed early (``awooop runs show ... | head -1``) stops the command quietly with
exit status 141 (128 + SIGPIPE), the status a shell reports for ``git log | head -1`` or
``ls | head -1``, whose processes SIGPIPE ends.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import os
import re
import sys
from collections.abc import Sequence

from awooop.core.config import Settings, load_settings
from awooop.core.errors import AwoooPError
from awooop.core.logs import configure_logging
from awooop.core.retries import (
    CONFLICT_ERRORS,
    CONNECTION_ERRORS,
    refused_by_policy,
    unavailable,
)

# Each command NAME is the module awooop.commands.NAME: it defines register(subparsers), which
# adds the command NAME and sets args.run = async fn(settings, args) -> int.
COMMANDS = (
    "migrate",
    "smoke",
    "serve",
    "channels",
    "tokens",
    "tenants",
    "loops",
    "relay",
    "revisions",
    "worker",
    "runs",
    "deadletters",
    "projects",
    "schedules",
    "replay",
    "projector",
    "demo",
    "up",
    "doctor",
)


def build_parser(commands: Sequence[str] = COMMANDS) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="awooop", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in commands:
        module = importlib.import_module(f"awooop.commands.{name}")
        module.register(subparsers)
        describe(subparsers, module.__doc__ or "")
    return parser


def parser_for(argv: Sequence[str]) -> argparse.ArgumentParser:
    """Only the command asked for is imported: a small command (``migrate``, ``tokens``)
    starts in a third of the time the whole set takes to import. Without a known command
    first (``--help``, a typo) every command is there, for the full help or the error."""
    if argv and argv[0] in COMMANDS:
        return build_parser([argv[0]])
    return build_parser()


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


# The exit status of a command whose standard output was closed by its reader: 128 + SIGPIPE.
CLOSED_PIPE = 141


def main(argv: Sequence[str] | None = None) -> int:
    try:
        try:
            return command(sys.argv[1:] if argv is None else list(argv))
        finally:
            sys.stdout.flush()  # what is still buffered, here (where a closed pipe is caught)
    except BrokenPipeError:
        return closed_pipe()


def closed_pipe() -> int:
    """Standard output's reader is gone: nothing more can be said there, and Python's flush of
    it at exit would print a traceback; the rest goes to /dev/null and the command stops."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return CLOSED_PIPE


def command(arguments: list[str]) -> int:
    args = parser_for(arguments).parse_args(arguments)
    try:
        settings: Settings = load_settings()
        configure_logging(settings.log_level)
        # A command may choose its event loop (serve runs on uvloop) with args.loop_factory.
        with asyncio.Runner(loop_factory=getattr(args, "loop_factory", None)) as runner:
            code: int = runner.run(args.run(settings, args))
    except AwoooPError as exc:
        print(f"error {exc.code}: {exc.message}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        raise  # standard output's reader left: main() stops quietly
    except CONNECTION_ERRORS + CONFLICT_ERRORS as exc:
        # The database away, refusing, too slow or in another transaction's way past the
        # command's own retries: the catalog's code and what to do, not a traceback. An OSError
        # that is no connection's (a file a command reads) is not the database's, and a
        # row-level security refusal is a bug, not an outage.
        local = isinstance(exc, OSError) and not isinstance(exc, ConnectionError | TimeoutError)
        if local or refused_by_policy(exc):
            raise
        typed = unavailable(exc, "the database")
        print(f"error {typed.code}: {typed.message} (try again later)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
