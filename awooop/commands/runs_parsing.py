"""``awooop runs``: what the command line's values mean (run ids, ``--filter``, the actor)."""

from __future__ import annotations

import getpass
import uuid
from pathlib import Path
from typing import Any

from awooop.core.errors import InvalidInputError
from awooop.runs import approval_options, listing

TOKEN_ENV = "AWOOOP_APPROVAL_TOKEN"  # noqa: S105 - the name of a variable, not a secret


def cli_actor() -> str:
    """Who runs this command, as recorded in the metadata of the events it writes."""
    return f"cli:{getpass.getuser()}"


def parse_run_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise InvalidInputError(f"run id {text!r} is not a UUID") from None


def split_ids(ids: list[str]) -> tuple[str | None, uuid.UUID]:
    if len(ids) > 2:
        raise InvalidInputError("expected [PROJECT] RUN_ID")
    return (ids[0] if len(ids) == 2 else None), parse_run_id(ids[-1])


def filter_fields(pairs: list[str]) -> dict[str, str]:
    """Pure: ``--filter KEY=VALUE`` options as fields (E-INPUT-001 for an unknown key)."""
    fields: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in listing.FILTER_KEYS:
            known = ", ".join(listing.FILTER_KEYS)
            raise InvalidInputError(
                f"--filter {pair[:60]!r}: expected KEY=VALUE, KEY one of {known}"
            )
        fields[key] = value
    return fields


def edited_payload(path: str | None, max_bytes: int) -> Any:
    """``--payload-file``: the edited payload of an approval decision, as JSON in that file
    (None: no file, or an empty one). A missing file or bad JSON is E-INPUT-001."""
    if path is None:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"cannot read --payload-file {path!r}: {exc}") from None
    return approval_options.parse_payload(f"--payload-file {path!r}", text, max_bytes)
