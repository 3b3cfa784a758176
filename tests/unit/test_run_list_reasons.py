"""A ``blocked_on`` filter on a FAILED reason is narrowed by failure code in SQL (a FAILED run's
reason is its code's), so the list does not decide every FAILED run to find the rarer one."""

from __future__ import annotations

from datetime import UTC, datetime

from awooop.runs import listing
from awooop.runs.blocked import DEAD_LETTER_CODES, Reason, failed_reason

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def test_the_failed_reasons_are_narrowed_by_failure_code_in_both_statements() -> None:
    dead = listing.parse_filter({"project": "p", "blocked_on": "failed_dead_lettered"}, NOW)
    other = listing.parse_filter({"project": "p", "blocked_on": "failed"}, NOW)
    for f, fragment in (
        (dead, listing.WHERE_DEAD_LETTER_CODE),
        (other, listing.WHERE_OTHER_CODE),
    ):
        for sql, names in (listing.statement(f, False), listing.count_statement(f)):
            assert fragment.split("$")[0] in sql, sql
            assert "dead_letter_codes" in names
        assert listing.values(f, None, 1)["dead_letter_codes"] == sorted(DEAD_LETTER_CODES)


def test_the_code_filters_agree_with_failed_reason() -> None:
    for code in [*DEAD_LETTER_CODES, "E-HANDLER-001", None]:
        in_dead = code in DEAD_LETTER_CODES  # failure_code = ANY(codes)
        in_other = code is None or code not in DEAD_LETTER_CODES  # IS NULL OR <> ALL(codes)
        assert in_dead == (failed_reason(code) is Reason.FAILED_DEAD_LETTERED)
        assert in_other == (failed_reason(code) is Reason.FAILED)


def test_other_reasons_add_no_code_condition() -> None:
    for reason in Reason:
        if reason in (Reason.FAILED, Reason.FAILED_DEAD_LETTERED):
            continue
        f = listing.parse_filter({"blocked_on": reason.value}, NOW)
        sql, names = listing.statement(f, False)
        assert "rs.failure_code =" not in sql and "rs.failure_code IS NULL" not in sql
        assert "dead_letter_codes" not in names
