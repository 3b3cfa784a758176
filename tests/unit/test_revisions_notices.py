"""The reader's pure reset decision: when must a worker drop its whole cache."""

from __future__ import annotations

import pytest

from awooop.revisions.notices import parse_id, reset_reason


def test_stream_ids_compare_numerically() -> None:
    assert parse_id("1700000000000-10") > parse_id("1700000000000-9")
    assert parse_id(b"1700000000001-0") > parse_id("1700000000000-99")
    assert parse_id("5") == (5, 0)


@pytest.mark.parametrize(
    ("known", "epoch", "last_id", "generated", "reason"),
    [
        (b"e1", b"e1", "10-0", "12-0", None),
        (b"e1", b"e1", "12-0", "12-0", None),
        (None, None, "0-0", None, None),  # no relay yet, nothing read: nothing lost
        (b"e1", b"e2", "10-0", "12-0", "epoch_changed"),
        (b"e1", None, "10-0", None, "epoch_missing"),  # Redis restarted empty
        (None, b"e1", "0-0", "3-0", "epoch_changed"),  # the stream appeared while we watched
        (b"e1", b"e1", "10-0", None, "stream_missing"),  # deleted behind the epoch's back
        (b"e1", b"e1", "10-5", "10-4", "id_beyond_stream"),  # recreated, shorter
    ],
)
def test_reset_reason(
    known: bytes | None, epoch: bytes | None, last_id: str, generated: str | None, reason: str
) -> None:
    assert reset_reason(known, epoch, last_id, generated) == reason
