"""How commands print: aligned tables for people, JSON (``--json``) for scripts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, two spaces apart, no trailing blanks."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    )


def to_json(value: Any) -> str:
    """One line of JSON (msgspec: UUIDs, datetimes and Structs as their JSON forms)."""
    return msgspec.json.encode(value).decode()


def when(moment: Any) -> str:
    """A timestamp cell: ISO-8601 to the second, '-' for none."""
    return "-" if moment is None else str(moment.isoformat(timespec="seconds"))
