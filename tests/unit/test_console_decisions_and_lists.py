"""Pure parts of the console's decisions without the approval token and of its lists: who a
rejection names, the person's name, the dead-letter filters and a page statement's arguments."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from awooop.core.errors import InvalidInputError
from awooop.core.events import ApprovalGranted, ApprovalRejected, decode_event
from awooop.eventlog.state import decider
from awooop.runs import approvals, deadletter_list, listing

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def test_a_decision_without_the_token_names_the_person_and_the_token() -> None:
    by_token = ApprovalRejected(at=NOW, actor="alice")
    assert decider(by_token) == "alice"
    by_session = ApprovalRejected(at=NOW, actor="manage-token:abc", by="Bob")
    assert decider(by_session) == "Bob (manage-token:abc)"


def test_stored_decisions_without_by_decode_and_new_ones_keep_it() -> None:
    old = decode_event(b'{"type":"ApprovalGranted","at":"2026-01-01T00:01:00Z","actor":"alice"}')
    assert old == ApprovalGranted(at=old.at, actor="alice", by=None)
    new = ApprovalGranted(at=NOW, actor="manage-token:abc", by="Ann")
    assert decode_event(msgspec.json.encode(new)) == new


@pytest.mark.parametrize("name", ["", "   ", "x" * 201])
def test_the_person_must_be_named(name: str) -> None:
    with pytest.raises(InvalidInputError):
        approvals.check_person(name)


def test_the_persons_name_is_trimmed() -> None:
    assert approvals.check_person("  Ann Lee ") == "Ann Lee"


def test_dead_letter_filters_from_the_url() -> None:
    f = deadletter_list.parse_filter(
        {"project": "p1", "channel": "api", "code": "e-run-004", "since": "2h", "x": "y"}, NOW
    )
    assert f == deadletter_list.DeadLetterFilter(
        project="p1", channel="api", code="E-RUN-004", since=NOW - timedelta(hours=2)
    )
    assert deadletter_list.parse_filter({"code": " ", "channel": ""}, NOW) == (
        deadletter_list.DeadLetterFilter()
    )


@pytest.mark.parametrize(
    "fields", [{"channel": "fax"}, {"code": "RUN-004"}, {"code": "E-" + "X" * 40}, {"since": "x"}]
)
def test_bad_dead_letter_filters_are_refused(fields: dict[str, str]) -> None:
    with pytest.raises(InvalidInputError):
        deadletter_list.parse_filter(fields, NOW)


def test_a_page_statement_reads_an_open_range_or_after_the_cursor() -> None:
    every = deadletter_list.statement(deadletter_list.DeadLetterFilter(), None, 200)
    assert every == [
        deadletter_list.EARLIEST,
        deadletter_list.LATEST,
        deadletter_list.LAST_ID,
        200,
        None,
        None,
    ]
    last = uuid.uuid4()
    f = deadletter_list.DeadLetterFilter(project="p1", code="E-RUN-005", since=NOW)
    after = deadletter_list.statement(f, listing.Cursor(NOW, last), 50)
    assert after == [NOW, NOW, last, 50, "E-RUN-005", None, "p1"]
