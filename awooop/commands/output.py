"""How commands print: aligned tables for people, JSON (``--json``) for scripts.

A table keeps each row on one line: a cell longer than its column's limit (the free-text
columns: DETAIL, REASON, ERROR, LAST ERROR, FAILURE) is cut with an ellipsis (``…``);
``--wide`` (:func:`add_wide`) prints every cell whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

ELLIPSIS = "…"
# The widest a free-text column gets without --wide (other columns are short by nature).
TEXT_LIMIT = 60
TEXT_COLUMNS = frozenset({"DETAIL", "REASON", "ERROR", "LAST ERROR", "FAILURE"})


def add_wide(parser: Any) -> None:
    """The ``--wide`` option of a command that prints a table."""
    parser.add_argument(
        "--wide",
        action="store_true",
        help=f"print long cells whole (default: cut at {TEXT_LIMIT} characters with {ELLIPSIS})",
    )


def clip(cell: str, limit: int) -> str:
    """Pure: ``cell`` on one line, at most ``limit`` characters, ``…`` where it was cut."""
    cell = " ".join(cell.split()) if "\n" in cell else cell
    return cell if len(cell) <= limit else cell[: limit - 1] + ELLIPSIS


def table(header: Sequence[str], rows: Sequence[Sequence[str]], *, wide: bool = False) -> str:
    """Columns padded to their widest cell, two spaces apart, no trailing blanks; free-text
    cells cut at ``TEXT_LIMIT`` with an ellipsis unless ``wide``."""
    if not wide:
        limits = [TEXT_LIMIT if name in TEXT_COLUMNS else None for name in header]
        rows = [
            [
                cell if limit is None else clip(cell, limit)
                for cell, limit in zip(row, limits, strict=True)
            ]
            for row in rows
        ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    )


def to_json(value: Any) -> str:
    """One line of JSON (msgspec: UUIDs, datetimes and Structs as their JSON forms)."""
    return msgspec.json.encode(value).decode()


def answer(args: Any, value: Any, text: str) -> int:
    """A command's answer, exit status 0: ``value`` as JSON with ``--json``, else ``text``."""
    print(to_json(value) if args.json else text)
    return 0


def when(moment: Any) -> str:
    """A timestamp cell: ISO-8601 to the second, '-' for none."""
    return "-" if moment is None else str(moment.isoformat(timespec="seconds"))
