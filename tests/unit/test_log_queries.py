"""The log room's SQL files: each loads by name, and the run row statements that take the row
as positional parameters list the columns in RunState's field order."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from awooop.ingest.store import LOOKUP_DEDUPE
from awooop.log import queries, writers
from awooop.log.state import COLUMNS


def _between(text: str, start: str, end: str) -> str:
    return text[text.index(start) + len(start) : text.index(end, text.index(start))]


def _names(column_list: str) -> list[str]:
    return [c.strip() for c in column_list.split(",")]


def test_every_sql_file_loads_by_its_name() -> None:
    sql = Path(queries.__file__).parent / "sql"
    assert set(queries.QUERIES) == {p.stem for p in sql.glob("*.sql")}
    with pytest.raises(KeyError):
        queries.load("no_such_statement")


def test_insert_run_takes_the_row_in_field_order() -> None:
    text = queries.load("insert_run")
    assert _names(_between(text, "awooop_run_state (", ")")) == list(COLUMNS)
    assert _names(_between(text, "VALUES (", ")")) == [f"${i + 1}" for i in range(len(COLUMNS))]


def test_update_run_takes_the_row_in_field_order() -> None:
    text = queries.load("update_run")
    sets = dict(re.findall(r"(\w+) = \$(\d+)", text))
    assert {c: int(n) for c, n in sets.items()} == {c: i + 1 for i, c in enumerate(COLUMNS)}


@pytest.mark.parametrize("name", ["claim_many", "complete_many", "ingest_new"])
def test_statements_that_return_or_insert_rows_name_every_column(name: str) -> None:
    words = set(re.findall(r"\w+", queries.load(name)))
    assert set(COLUMNS) <= words


def test_the_writers_table_and_writers_md_agree() -> None:
    text = (Path(writers.__file__).parent / "WRITERS.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(\w+)`", text, re.MULTILINE)
    assert rows == [w.name for w in writers.WRITERS]


def test_ingest_new_ends_with_the_same_dedupe_probe_as_the_lookup() -> None:
    """ingest_new.sql and awooop.ingest.store.LOOKUP_DEDUPE probe the dedupe keys alike (one
    index probe per key, LIMIT 1 against a flattened join): the two texts must not drift."""
    start = "FROM unnest($3::text[]) AS k(provider_event_id)"
    ingest = queries.load("ingest_new")
    probe = ingest[ingest.rindex(start) :]
    lookup = LOOKUP_DEDUPE[LOOKUP_DEDUPE.index(start) :]
    # The one difference: the TTL is the lookup's 4th parameter and ingest_new's 5th.
    assert probe.strip() == lookup.replace("$4::float8", "$5::float8").strip()
