"""The pure parts of the runs listing: --since, --status, --limit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from awooop.core.errors import InvalidInputError
from awooop.runs.reads import check_limit, check_status, parse_since

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("15m", NOW - timedelta(minutes=15)),
        ("2h", NOW - timedelta(hours=2)),
        ("3d", NOW - timedelta(days=3)),
        ("30s", NOW - timedelta(seconds=30)),
        ("2026-02-28T10:00:00Z", datetime(2026, 2, 28, 10, tzinfo=UTC)),
        ("2026-02-28T10:00:00", datetime(2026, 2, 28, 10, tzinfo=UTC)),
        ("2026-02-28", datetime(2026, 2, 28, tzinfo=UTC)),
        (
            "2026-02-28T10:00:00+02:00",
            datetime(2026, 2, 28, 10, tzinfo=timezone(timedelta(hours=2))),
        ),
    ],
)
def test_since_accepts_durations_and_iso_timestamps(text: str, expected: datetime) -> None:
    assert parse_since(text, NOW) == expected


@pytest.mark.parametrize("text", ["", "15", "m", "-2h", "2w", "1.5h", "yesterday", "2026-13-01"])
def test_since_refuses_anything_else(text: str) -> None:
    with pytest.raises(InvalidInputError) as refused:
        parse_since(text, NOW)
    assert "ISO timestamp" in refused.value.message


def test_status_and_limit() -> None:
    assert check_status("failed") == "FAILED"
    with pytest.raises(InvalidInputError):
        check_status("DONE")
    assert check_limit(1) == 1
    for bad in (0, -1, 10_001):
        with pytest.raises(InvalidInputError):
            check_limit(bad)
