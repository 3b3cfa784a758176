"""What a migration's checksum covers, and which recorded checksums a file accepts.

A migration's checksum is the sha256 of its normalised SQL: comments (``--`` to the end of the
line, ``/* */``) are dropped, and whitespace is one space between two words and nothing next to
punctuation, outside string literals, quoted identifiers and dollar-quoted bodies. Those are
kept byte for byte: a function's body is stored in the catalogue as written, comments
included. Rewording a comment or re-indenting a released file changes nothing a database can
tell.

Each row of ``awooop_schema_migrations`` keeps the raw sha256 of the file's text (``checksum``:
what every release records and compares, so an earlier release's ``awooop migrate`` and doctor
still accept a database a later one migrated) and, from this rule on, the normalised checksum
(``normalised``). A row is accepted when:

- its normalised checksum is the file's (comments and layout edited since: accepted as is);
- its raw checksum is the file's (the same bytes);
- its raw checksum is that of an earlier released version of the file, listed in
  ``migrations/released.toml`` with the reason it is accepted: ``comments`` (the version
  differs from the current file only in comments and whitespace; a test holds this against
  git history) or ``body`` (the statements differed; the entry names the migration that brings
  such a database to the schema of a fresh one).

Anything else means the database was migrated with files this release never shipped.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal, NamedTuple

from awooop.core.errors import ConfigError

RELEASED_FILE = "released.toml"
DOLLAR_TAG = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$")
IDENTIFIER_CHAR = re.compile(r"[A-Za-z0-9_$]")
Kind = Literal["comments", "body"]


def normalise_sql(sql: str) -> str:
    """The statements of ``sql`` without comments; outside literals, whitespace between two
    words is one space and whitespace next to punctuation is dropped."""
    out: list[str] = []
    i, n = 0, len(sql)
    pending_space = False

    def emit(text: str) -> None:
        nonlocal pending_space
        if pending_space and out and _is_word_char(out[-1][-1]) and _is_word_char(text[0]):
            out.append(" ")
        pending_space = False
        out.append(text)

    while i < n:
        ch = sql[i]
        if ch.isspace():
            pending_space = True
            i += 1
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end
            pending_space = True
        elif sql.startswith("/*", i):
            i = _block_comment_end(sql, i)
            pending_space = True
        elif ch == "'":
            escapes = i > 0 and sql[i - 1] in "eE" and not _continues_identifier(sql, i - 1)
            end = _quoted_end(sql, i, "'", backslash=escapes)
            emit(sql[i:end])
            i = end
        elif ch == '"':
            end = _quoted_end(sql, i, '"', backslash=False)
            emit(sql[i:end])
            i = end
        elif ch == "$" and (dollar_end := dollar_quote_end(sql, i)) is not None:
            emit(sql[i:dollar_end])
            i = dollar_end
        else:
            start = i
            while i < n and not sql[i].isspace() and sql[i] not in "'\"$-/":
                i += 1
            if i == start:  # a '$', '-' or '/' that starts no literal or comment
                i += 1
            emit(sql[start:i])
    return "".join(out)


def _is_word_char(ch: str) -> bool:
    """Whitespace between two of these separates tokens; next to anything else (brackets,
    commas, operators) it is layout, so re-indenting or re-wrapping a statement counts
    for nothing."""
    return ch.isalnum() or ch in "_$'\""


def _continues_identifier(sql: str, i: int) -> bool:
    """Whether the character before position i belongs to an identifier or a number (so a
    ``$`` there is part of a name like ``a$b`` and an ``e`` there is not a string prefix)."""
    return i > 0 and IDENTIFIER_CHAR.match(sql[i - 1]) is not None


def dollar_quote_end(sql: str, i: int) -> int | None:
    """Index just past the dollar-quoted literal opening at ``i`` (the end of the text when it
    never closes), or None when no dollar quote opens there."""
    if _continues_identifier(sql, i):
        return None
    tag = DOLLAR_TAG.match(sql, i)
    if tag is None:
        return None
    close = sql.find(tag.group(0), tag.end())
    return len(sql) if close < 0 else close + len(tag.group(0))


def _quoted_end(sql: str, start: int, quote: str, *, backslash: bool) -> int:
    """Index just past the literal opening at ``start``; a doubled quote stays inside it."""
    i = start + 1
    while i < len(sql):
        if backslash and sql[i] == "\\":
            i += 2
        elif sql[i] == quote:
            if sql.startswith(quote * 2, i):
                i += 2
            else:
                return i + 1
        else:
            i += 1
    return len(sql)


def _block_comment_end(sql: str, start: int) -> int:
    """Index just past the ``/* */`` comment opening at ``start`` (they nest in PostgreSQL)."""
    depth, i = 0, start
    while i < len(sql):
        if sql.startswith("/*", i):
            depth, i = depth + 1, i + 2
        elif sql.startswith("*/", i):
            depth, i = depth - 1, i + 2
            if depth == 0:
                return i
        else:
            i += 1
    return len(sql)


def raw_checksum(sql: str) -> str:
    """What releases before normalisation recorded: the sha256 of the file's text."""
    return hashlib.sha256(sql.encode()).hexdigest()


# /readyz and doctor compare the release's files on every call: normalise each text once.
@lru_cache(maxsize=1024)
def normalised_checksum(sql: str) -> str:
    return hashlib.sha256(normalise_sql(sql).encode()).hexdigest()


@dataclass(frozen=True)
class ReleasedVersion:
    """An earlier released version of a migration file that a database may have recorded."""

    file: str
    checksum: str  # raw sha256, as the release that applied it recorded
    release: str  # the commit on main that shipped this version
    kind: Kind
    why: str
    repaired_by: str | None = None


def load_released(directory: Path) -> list[ReleasedVersion]:
    path = directory / RELEASED_FILE
    if not path.exists():
        return []
    try:
        entries = tomllib.loads(path.read_text()).get("version", [])
        versions = [ReleasedVersion(**entry) for entry in entries]
    except (tomllib.TOMLDecodeError, TypeError) as exc:
        raise ConfigError(f"{path} is not a list of [[version]] tables: {exc}") from exc
    for v in versions:
        if v.kind not in ("comments", "body") or (v.kind == "body") != bool(v.repaired_by):
            raise ConfigError(
                f"{path}: {v.file} {v.checksum[:12]}: kind must be 'comments', or 'body' "
                "with repaired_by naming the migration that repairs it"
            )
    return versions


def accepted_by_file(versions: Iterable[ReleasedVersion]) -> dict[str, frozenset[str]]:
    accepted: dict[str, set[str]] = {}
    for v in versions:
        accepted.setdefault(v.file, set()).add(v.checksum)
    return {name: frozenset(sums) for name, sums in accepted.items()}


class Recorded(NamedTuple):
    """One row of awooop_schema_migrations."""

    checksum: str  # raw sha256 of the text applied
    normalised: str | None  # None: recorded by a release before normalised checksums


def recorded_is_released(
    name: str, sql: str, recorded: Recorded, accepted: Mapping[str, frozenset[str]]
) -> bool:
    """Whether a database that recorded ``recorded`` for file ``name`` applied a released
    version of it (the current one, or an earlier one listed in released.toml)."""
    return (
        recorded.normalised == normalised_checksum(sql)
        or recorded.checksum == raw_checksum(sql)
        or recorded.checksum in accepted.get(name, frozenset())
    )


def unreleased_message(changed: list[str], recorded: Mapping[str, Recorded]) -> str:
    """E-MIGRATE-001's text, for an operator: what is wrong and what to do."""
    listed = ", ".join(f"{name} (recorded {recorded[name].checksum[:12]})" for name in changed)
    return (
        f"this database applied versions of {listed} that this release does not ship: it was "
        "migrated from other migration files (a development build, or an edited copy of "
        "migrations/). Nothing was changed. Check that this release's migrations/ folder is "
        "the released one (reinstall the release), run `awooop doctor` to list every differing "
        "file, and migrate with the release whose files applied them; if none did, restore the "
        "backup taken before that migration (docs/operations.md, Upgrading)"
    )
