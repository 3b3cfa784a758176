"""Pure parts of the run search: what a term matches, LIKE escaping, key ranges, refusals."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from awooop.core.errors import InvalidInputError
from awooop.http import runs as runs_api
from awooop.runs import listing, search

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def test_a_hex_term_is_also_a_run_id_prefix_with_dashes_ignored() -> None:
    term = search.classify("3F2a-9c")
    assert term.id_range == (
        uuid.UUID("3f2a9c00-0000-0000-0000-000000000000"),
        uuid.UUID("3f2a9cff-ffff-ffff-ffff-ffffffffffff"),
    )
    assert term.key_range == ("3F2a-9c", "3F2a-9d")
    assert term.pattern == "%3F2a-9c%"


def test_a_term_that_is_no_id_prefix_is_key_prefix_and_text_only() -> None:
    term = search.classify("tg-update")
    assert term.id_range is None
    assert term.key_range == ("tg-update", "tg-updatf")
    assert search.id_range("0" * 33) is None


def test_like_wildcards_and_the_escape_are_literals() -> None:
    assert search.escape_like(r"50%_a\b") == r"50\%\_a\\b"
    assert search.classify("100%").pattern == r"%100\%%"


def test_the_key_range_upper_bound_is_above_every_key_with_the_prefix() -> None:
    assert search.key_upper("ab") == "ac"
    assert search.key_upper("a\ud7ff") == "a\ue000"
    assert search.key_upper("a\U0010ffff") == "b"
    assert search.key_upper("\U0010ffff") is None
    for key in ("ab", "ab\U0010ffff", "abzzz", "ab\x7f"):
        assert "ab" <= key < "ac" and key.encode() < b"ac"


@pytest.mark.parametrize("text", ["", "  ", "ab", " a ", "x" * 201, "abc\x00def"])
def test_short_long_or_control_character_terms_are_refused(text: str) -> None:
    with pytest.raises(InvalidInputError) as raised:
        search.check_search(text)
    assert raised.value.code == "E-INPUT-001"


def test_failure_codes_to_leave_out_are_checked_and_sorted() -> None:
    assert search.check_codes(" E-RUN-005,E-RUN-004,,E-RUN-004 ") == ("E-RUN-004", "E-RUN-005")
    for bad in ("E RUN", "x;drop", ",".join(f"E-{i}" for i in range(21))):
        with pytest.raises(InvalidInputError):
            search.check_codes(bad)


def test_the_filter_carries_search_and_exclusions_and_the_statement_reads_found_ids() -> None:
    f = listing.parse_filter(
        {"search": " hello ", "exclude_codes": "E-RUN-004", "status": "FAILED"}, NOW
    )
    assert f.search == "hello" and f.exclude_codes == ("E-RUN-004",)
    sql, names = listing.statement(f, before=True)
    assert "rs.run_id = ANY($" in sql and "unnest" not in sql
    assert names == ["statuses", "found", "exclude_codes", "before_at", "before_id", "limit"]
    assert "failure_code <> ALL" in sql
    with pytest.raises(InvalidInputError):
        listing.parse_filter({"search": "hi"}, NOW)
    assert listing.parse_filter({"exclude_codes": " , "}, NOW).exclude_codes is None


def test_the_api_lists_page_size_is_bounded() -> None:
    assert runs_api.page_size("") == listing.PAGE
    assert runs_api.page_size("200") == 200
    for bad in ("0", "201", "-1", "ten"):
        with pytest.raises(InvalidInputError):
            runs_api.page_size(bad)
