"""The log room's SQL, one statement per ``sql/<name>.sql`` file, read once at import.

The statements are plain text files (as procrastinate keeps its queries) so that each one can
be read, diffed and pasted into psql as it is sent; Python never builds them. ``load`` raises
KeyError for a name that has no file, at import time of the module that asks.
"""

from __future__ import annotations

from importlib import resources

_SQL = resources.files(__package__) / "sql"

QUERIES: dict[str, str] = {
    entry.name.removesuffix(".sql"): entry.read_text(encoding="utf-8")
    for entry in _SQL.iterdir()
    if entry.name.endswith(".sql")
}


def load(name: str) -> str:
    """The text of ``sql/<name>.sql``."""
    return QUERIES[name]
