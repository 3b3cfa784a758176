"""Every ``awooop ...`` command line shipped in ``ops/`` and shown in the docs parses with the
real CLI parser (:func:`awooop.cli.build_parser`), and every ``--handler`` /
``--approval-notifier`` given there that names a real module loads.

Where command lines come from:

- ``ops/**/*.yaml``: each service's ``command`` (compose) and each container's ``command`` +
  ``args`` (Kubernetes manifests), read as YAML, so what runs is exactly what is checked;
- ``ops/Dockerfile`` ``CMD``/``ENTRYPOINT`` (JSON form) and shell lines of ``ops/**/*.sh``;
- the README and ``docs/*.md``: lines starting with ``awooop`` (or ``$(awooop``) in shell
  code blocks (fenced as sh/bash/shell/console) and indented code blocks. These are synopses
  as often as examples: an optional part in brackets is dropped, upper-case placeholders and
  ``...`` stand for values (strings to the parser), ``A|B`` alternatives keep their first
  choice, and a trailing ``# comment`` or shell redirection is cut off.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from awooop.cli import build_parser
from awooop.commands.worker import load_callable

ROOT = Path(__file__).resolve().parents[2]
OPS = ROOT / "ops"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


class Refused(Exception):
    """argparse refused the command line (it would exit 2)."""


def parse(argv: list[str]) -> argparse.Namespace:
    """``awooop argv`` through the real parser; an error raises :class:`Refused` with
    argparse's message instead of exiting."""
    parser = build_parser()

    def refuse(message: str) -> None:
        raise Refused(message)

    # Every subparser (at any depth) reports errors through refuse() instead of sys.exit(2).
    stack = [parser]
    while stack:
        current = stack.pop()
        current.error = refuse  # type: ignore[method-assign,assignment]  # raise, don't exit
        current.exit_on_error = False
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                stack.extend(action.choices.values())
    try:
        return parser.parse_args(argv)
    except argparse.ArgumentError as exc:  # what a subparser raises with exit_on_error off
        raise Refused(str(exc)) from None


# --- where the command lines are -----------------------------------------------------------


def _yaml_commands(path: Path) -> Iterator[list[str]]:
    for doc in yaml.safe_load_all(path.read_text()):
        yield from _commands_in(doc)


def _commands_in(node: object) -> Iterator[list[str]]:
    """``command`` (+ ``args``) lists anywhere in a YAML document whose program is awooop."""
    if isinstance(node, dict):
        command = node.get("command")
        if isinstance(command, list) and command and command[0] == "awooop":
            yield [str(part) for part in command] + [str(a) for a in node.get("args") or []]
        elif isinstance(command, str) and command.split()[:1] == ["awooop"]:
            yield shlex.split(command)
        for value in node.values():
            yield from _commands_in(value)
    elif isinstance(node, list):
        for item in node:
            yield from _commands_in(item)


def _dockerfile_commands(path: Path) -> Iterator[list[str]]:
    for line in path.read_text().splitlines():
        match = re.match(r"\s*(CMD|ENTRYPOINT)\s+(\[.*\])\s*$", line)
        if match:
            argv = json.loads(match.group(2))
            if argv[:1] == ["awooop"]:
                yield argv


def _shell_commands(path: Path) -> Iterator[list[str]]:
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("awooop "):
            yield _shell_words(line.strip())


def _shell_words(line: str) -> list[str]:
    """The words of one shell command, up to a comment, pipe, redirection or ``)``."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars="|&;<>()")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    words = []
    for word in lexer:
        if word and set(word) <= set("|&;<>()"):
            break
        words.append(word)
    return words


def _doc_command_lines(text: str) -> Iterator[str]:
    """``awooop ...`` lines of the fenced (```) and indented code blocks of a markdown text."""
    fenced = in_fence = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_fence = not in_fence  # a shell block, not a diagram or Python
            fenced = in_fence and line.strip()[3:] in ("sh", "bash", "shell", "console")
            continue
        indented = (
            not in_fence
            and line.startswith("    ")
            and not line.lstrip().startswith(("-", "*", "|"))
        )
        if not (fenced or indented):
            continue
        stripped = line.strip()
        for start in ("awooop ", "$(awooop "):
            if start in stripped and (stripped.startswith(start) or "=$(awooop " in stripped):
                yield stripped[stripped.index(start) :].removeprefix("$(")
                break


def synopsis_to_argv(line: str) -> list[str]:
    """Pure: a documented synopsis as an argv that must parse (see the module docstring)."""
    line = re.sub(r"\s+#.*$", "", line)
    while True:  # drop optional groups, innermost first
        shorter = re.sub(r"\[[^\[\]]*\]", "", line)
        if shorter == line:
            break
        line = shorter
    words = _shell_words(line)
    argv = []
    for word in words:
        if "|" in word and not word.startswith("-") and "'" not in line:
            word = word.split("|")[0]
        argv.append(word)
    return argv


def ops_commands() -> list[tuple[str, list[str]]]:
    found: list[tuple[str, list[str]]] = []
    for path in sorted(OPS.rglob("*")):
        if "results" in path.parts or not path.is_file():
            continue
        where = str(path.relative_to(ROOT))
        if path.suffix in (".yaml", ".yml"):
            found += [(where, argv) for argv in _yaml_commands(path)]
        elif path.name == "Dockerfile":
            found += [(where, argv) for argv in _dockerfile_commands(path)]
        elif path.suffix == ".sh":
            found += [(where, argv) for argv in _shell_commands(path)]
    return found


def doc_commands() -> list[tuple[str, list[str]]]:
    found = []
    for path in DOCS:
        for line in _doc_command_lines(path.read_text()):
            found.append((f"{path.relative_to(ROOT)}: {line}", synopsis_to_argv(line)))
    return found


# --- the tests ---------------------------------------------------------------------------


def test_the_sources_are_found() -> None:
    """The extraction itself works: the compose stack's processes and the docs' examples are
    among the command lines checked (an extractor that finds nothing checks nothing)."""
    ops = {" ".join(argv[:3]) for where, argv in ops_commands() if where == "ops/compose.yaml"}
    assert {"awooop migrate", "awooop serve", "awooop loops run", "awooop projector"} <= ops
    assert any(argv[:2] == ["awooop", "worker"] for _, argv in ops_commands())
    docs = doc_commands()
    assert len(docs) > 20
    assert any("docs/workers.md" in where for where, _ in docs)


@pytest.mark.parametrize(("where", "argv"), ops_commands(), ids=lambda v: str(v)[:80])
def test_every_ops_command_line_parses(where: str, argv: list[str]) -> None:
    assert argv[0] == "awooop"
    if argv[1:] == ["--help"]:
        return  # the image's default CMD: prints the help and exits 0
    args = parse(argv[1:])
    assert callable(args.run), where
    for option in ("handler", "approval_notifier"):
        spec = getattr(args, option, None)
        if spec is not None:
            load_callable(spec, option)  # a handler the image has: the worker would start


@pytest.mark.parametrize(("where", "argv"), doc_commands(), ids=lambda v: str(v)[:80])
def test_every_documented_command_line_parses(where: str, argv: list[str]) -> None:
    assert argv[0] == "awooop", where
    args = parse(argv[1:])
    assert callable(args.run), where


def test_the_compose_worker_starts_with_the_example_handler() -> None:
    """The compose stack's worker command gets past the parser (it once lacked ``--handler``,
    which the CLI refuses with exit 2) and names a handler that loads."""
    [worker] = [
        argv for where, argv in ops_commands() if where == "ops/compose.yaml" and "worker" in argv
    ]
    args = parse(worker[1:])
    assert args.handler == "awooop.examples.handlers:handle"
    assert load_callable(args.handler).__name__ == "handle"
    with pytest.raises(Refused, match="--handler"):
        parse(["worker"])


@pytest.mark.parametrize(
    ("line", "argv"),
    [
        (
            "awooop runs show    [PROJECT] RUN_ID      # state + timeline",
            ["awooop", "runs", "show", "RUN_ID"],
        ),
        (
            "awooop revisions activate P F C R [--expected REV|none]",
            ["awooop", "revisions", "activate", "P", "F", "C", "R"],
        ),
        (
            'awooop channels set-secret shop gitea  -  <<< "$SECRET"',
            ["awooop", "channels", "set-secret", "shop", "gitea", "-"],
        ),
        (
            "awooop worker --handler ... --burst",
            ["awooop", "worker", "--handler", "...", "--burst"],
        ),
    ],
)
def test_synopses_become_argv(line: str, argv: list[str]) -> None:
    assert synopsis_to_argv(line) == argv
