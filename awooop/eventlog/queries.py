"""The log room's SQL, one statement per ``sql/<name>.sql`` file, composed once at import.

The statements are plain text files (as procrastinate keeps its queries) so that each one can
be read, diffed and pasted into psql as it is sent; Python never builds them. A rule that
several statements share (the run row's columns, the stream-head rule, the dedupe probe) is
written once, in a fragment file ``sql/_<name>.sql``, and a statement includes it where it
writes ``{{name}}``. :func:`compose` puts the fragments in (a fragment may include others)
when this module is imported, so :data:`QUERIES` holds each statement exactly as it is sent.
A fragment file's leading ``--`` lines say what it is and are not part of the text; its
later lines are indented to where the placeholder stands. An unknown fragment, a fragment that
includes itself, or an unknown statement name is an AwoooPError (E-INTERNAL-001) naming it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib import resources

from awooop.core.errors import AwoooPError

FRAGMENT_PREFIX = "_"
PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")

_SQL = resources.files(__package__) / "sql"


def fragment_text(source: str) -> str:
    """Pure: a fragment file's text without its leading comment lines and outer white space."""
    lines = source.strip().splitlines()
    while lines and lines[0].lstrip().startswith("--"):
        lines.pop(0)
    return "\n".join(lines).strip()


def compose(
    text: str, fragments: Mapping[str, str], where: str, _within: tuple[str, ...] = ()
) -> str:
    """Pure: ``text`` with each ``{{name}}`` replaced by the fragment ``name`` (composed in
    turn), its lines after the first indented to the placeholder's column. ``where`` names the
    statement for the error."""

    def include(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in fragments:
            raise AwoooPError(f"unknown SQL fragment {{{{{name}}}}} in {where}", fragment=name)
        if name in _within:
            chain = " -> ".join((*_within, name))
            raise AwoooPError(f"SQL fragment includes itself: {chain} in {where}", fragment=name)
        body = compose(fragments[name], fragments, where, (*_within, name))
        column = match.start() - (text.rfind("\n", 0, match.start()) + 1)
        return body.replace("\n", "\n" + " " * column)

    return PLACEHOLDER.sub(include, text)


def fragments_of(files: Mapping[str, str]) -> dict[str, str]:
    """Pure: the fragments of ``files`` (file stem -> text), by name, as written."""
    return {
        stem.removeprefix(FRAGMENT_PREFIX): fragment_text(text)
        for stem, text in files.items()
        if stem.startswith(FRAGMENT_PREFIX)
    }


def read_all(files: Mapping[str, str]) -> dict[str, str]:
    """Pure: the statements of ``files`` (file stem -> text), fragments composed in; the
    fragment files themselves are not statements."""
    fragments = fragments_of(files)
    return {
        stem: compose(text, fragments, f"sql/{stem}.sql")
        for stem, text in files.items()
        if not stem.startswith(FRAGMENT_PREFIX)
    }


_FILES = {
    entry.name.removesuffix(".sql"): entry.read_text(encoding="utf-8")
    for entry in _SQL.iterdir()
    if entry.name.endswith(".sql")
}
QUERIES: dict[str, str] = read_all(_FILES)
FRAGMENTS: dict[str, str] = fragments_of(_FILES)


def load(name: str) -> str:
    """The text of ``sql/<name>.sql`` as it is sent (fragments composed in)."""
    try:
        return QUERIES[name]
    except KeyError:
        raise AwoooPError(f"no SQL statement named {name!r} (sql/{name}.sql)", query=name) from None


def fragment(name: str) -> str:
    """The rule of ``sql/_<name>.sql`` (its fragments composed in), for a statement written
    elsewhere that must apply the same rule (an operator's query, a test's check)."""
    if name not in FRAGMENTS:
        raise AwoooPError(f"no SQL fragment named {name!r} (sql/_{name}.sql)", fragment=name)
    return compose(FRAGMENTS[name], FRAGMENTS, f"sql/_{name}.sql")
