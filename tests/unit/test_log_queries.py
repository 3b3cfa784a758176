"""The log room's SQL files: each loads by name with its fragments composed in, and the run
row's columns (written once, in ``_run_fields.sql``) are RunState's fields in order."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from awooop.core.errors import AwoooPError
from awooop.eventlog import queries, writers
from awooop.eventlog.state import COLUMNS

SQL = Path(queries.__file__).parent / "sql"


def test_every_statement_file_loads_by_its_name_and_no_fragment_does() -> None:
    stems = {p.stem for p in SQL.glob("*.sql")}
    assert set(queries.QUERIES) == {s for s in stems if not s.startswith("_")}
    assert {s for s in stems if s.startswith("_")}  # the fragments are there, not statements
    for name in ("no_such_statement", "_run_columns"):
        with pytest.raises(AwoooPError, match=name) as raised:
            queries.load(name)
        assert raised.value.code == "E-INTERNAL-001"


def test_no_statement_is_sent_with_a_placeholder_left_in() -> None:
    for name, text in queries.QUERIES.items():
        assert "{{" not in text and "}}" not in text, name


def test_the_run_columns_are_run_states_fields_in_order() -> None:
    fragment = queries.fragment_text((SQL / "_run_columns.sql").read_text(encoding="utf-8"))
    fields = queries.fragment_text((SQL / "_run_fields.sql").read_text(encoding="utf-8"))
    composed = queries.compose(fragment, {"run_fields": fields}, "test")
    assert [c.strip() for c in composed.split(",")] == list(COLUMNS)


def test_compose_puts_a_fragment_in_at_its_placeholder() -> None:
    text = queries.compose("SELECT {{cols}} FROM t", {"cols": "a, b"}, "q")
    assert text == "SELECT a, b FROM t"


def test_compose_indents_a_fragments_later_lines_to_its_placeholder() -> None:
    text = queries.compose("SELECT {{cols}}\nFROM t", {"cols": "a,\nb"}, "q")
    assert text == "SELECT a,\n       b\nFROM t"


def test_a_fragment_may_include_another() -> None:
    fragments = {"all": "id, {{rest}}", "rest": "a, b"}
    assert queries.compose("({{all}})", fragments, "q") == "(id, a, b)"


def test_an_unknown_fragment_is_a_coded_error_naming_it_and_the_statement() -> None:
    with pytest.raises(AwoooPError, match=r"\{\{nope\}\} in sql/q\.sql") as raised:
        queries.compose("SELECT {{nope}}", {"cols": "a"}, "sql/q.sql")
    assert raised.value.code == "E-INTERNAL-001"
    assert raised.value.details == {"fragment": "nope"}


def test_a_fragment_that_includes_itself_is_a_coded_error() -> None:
    with pytest.raises(AwoooPError, match="a -> b -> a"):
        queries.compose("{{a}}", {"a": "x {{b}}", "b": "{{a}}"}, "q")


def test_read_all_composes_statements_and_keeps_fragments_out() -> None:
    files = {"_cols": "-- what the columns are\na, b\n", "pick": "SELECT {{cols}} FROM t\n"}
    assert queries.read_all(files) == {"pick": "SELECT a, b FROM t\n"}


def test_a_fragments_leading_comment_is_not_part_of_it() -> None:
    assert queries.fragment_text("-- says why\n--  more\nx = 1\n-- kept\n") == "x = 1\n-- kept"


def test_the_writers_table_and_writers_md_agree() -> None:
    text = (Path(writers.__file__).parent / "WRITERS.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(\w+)`", text, re.MULTILINE)
    assert rows == [w.name for w in writers.WRITERS]
