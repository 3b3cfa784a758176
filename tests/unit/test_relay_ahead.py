"""The relay's read-ahead bookkeeping (awooop.streams.relay_ahead, pure): what the cursor skips,
what a capped read may publish, when the next read starts from a snapshot, and the snapshot's
text."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from awooop.eventlog.eventlog import Cursor, RecordedEvent
from awooop.eventlog.read_ahead import Snapshot, parse_snapshot
from awooop.streams.envelope import Envelope, decode_envelope, encode
from awooop.streams.keys import Keys
from awooop.streams.publish import by_shard
from awooop.streams.relay_ahead import Ahead, ReadAhead, fitting, unpublished
from awooop.streams.relay_trim import cursor_key, safe_point_of

AT = datetime(2026, 1, 1, tzinfo=UTC)


def row(tx_id: int, position: int, stream: str = "run-a", version: int = 1) -> RecordedEvent:
    return RecordedEvent(
        position=position,
        tx_id=tx_id,
        event_id=uuid.uuid4(),
        stream_id=stream,
        version=version,
        project_id="p",
        event_type="RunCreated",
        data='{"type":"RunCreated"}',
        metadata={},
        recorded_at=AT,
    )


SNAP = Snapshot(100, 120, (100, 105))


def test_parse_snapshot_reads_xmin_xmax_and_the_running_list() -> None:
    assert parse_snapshot("100:120:100,105") == SNAP
    assert parse_snapshot("7:7:") == Snapshot(7, 7, ())


def test_the_cursor_skips_what_was_published_ahead_and_forgets_it_once_passed() -> None:
    ahead = ReadAhead()
    early, late = row(110, 50), row(111, 51)
    ahead.record(Ahead([early, late], SNAP, complete=True))
    held = row(100, 40)  # the long transaction, committed at last: never published ahead
    batch = [held, early, late]
    assert unpublished(batch, ahead.published) == [held]
    assert ahead.unpublished(batch) == [held]
    ahead.passed(Cursor(110, 50))
    assert ahead.published == {51}
    assert ahead.positions_after(Cursor(100, 40)) == [51]
    ahead.passed(Cursor(111, 51))
    assert len(ahead) == 0
    assert ahead.unpublished(batch) == batch


def test_positions_after_come_in_log_order_whatever_order_they_were_recorded_in() -> None:
    ahead = ReadAhead()
    ahead.record(Ahead([row(120, 9), row(121, 10)], SNAP, complete=True))
    ahead.record(Ahead([row(105, 30)], SNAP, complete=True))  # a late commit of an old xid
    assert ahead.positions_after(Cursor(0, 0)) == [30, 9, 10]
    assert ahead.positions_after(Cursor(105, 30)) == [9, 10]


def test_a_complete_read_moves_the_next_read_to_its_snapshot() -> None:
    ahead = ReadAhead()
    assert ahead.since is None
    ahead.record(Ahead([row(110, 1)], SNAP, complete=True))
    assert ahead.since == SNAP
    assert not ahead.full


def test_a_capped_read_publishes_a_prefix_and_stops_reading_ahead_until_the_cursor_passes() -> None:
    rows = [row(110, 1), row(111, 2), row(112, 3)]
    assert fitting(rows, 3) == (rows, True)
    assert fitting(rows, 2) == (rows[:2], False)
    ahead = ReadAhead(limit=2)
    ahead.record(Ahead(rows[:2], SNAP, complete=False))
    assert ahead.full
    assert ahead.since is None  # the capped read's snapshot is not a basis for a next one
    ahead.passed(Cursor(110, 1))
    assert ahead.full  # one published-ahead event is still ahead of the cursor
    ahead.passed(Cursor(111, 2))
    assert not ahead.full and ahead.since is None  # resumes with one full read


def test_idle_forgets_the_snapshot_only_when_nothing_is_ahead() -> None:
    ahead = ReadAhead()
    ahead.record(Ahead([row(110, 1)], SNAP, complete=True))
    ahead.idle()
    assert ahead.since == SNAP
    ahead.passed(Cursor(110, 1))
    ahead.idle()
    assert ahead.since is None


def test_reset_forgets_everything() -> None:
    ahead = ReadAhead()
    ahead.record(Ahead([row(110, 1)], SNAP, complete=True))
    ahead.reset()
    assert len(ahead) == 0 and ahead.since is None and ahead.positions_after(Cursor()) == []


def test_entries_published_ahead_carry_the_cursor_and_old_entries_decode_without_it() -> None:
    (items,) = by_shard([row(110, 1)], _keys(), ahead_of=(99, 7)).values()
    assert decode_envelope(items[0][1]).ahead_of == (99, 7)
    (plain,) = by_shard([row(110, 1)], _keys()).values()
    assert decode_envelope(plain[0][1]).ahead_of is None
    # An entry written before the field existed (one element fewer) still decodes.
    old = decode_envelope(plain[0][1])
    short = encode(old)[:-1]  # msgpack array: drop the trailing nil element
    assert short[0] & 0x0F == 13  # fixarray of 13 elements
    legacy = bytes([0x90 | 12]) + short[1:]
    assert decode_envelope(legacy) == old


@pytest.mark.parametrize(
    ("floor", "ahead_of", "safe"),
    [((200, 9), None, (200, 8)), ((200, 9), (150, 3), (150, 3)), ((120, 9), (150, 3), (120, 8))],
)
def test_the_trim_safe_point_of_an_entry_published_ahead_is_at_most_its_cursor(
    floor: tuple[int, int], ahead_of: tuple[int, int] | None, safe: tuple[int, int]
) -> None:
    envelope = Envelope(
        event_id=uuid.uuid4(),
        position=floor[1],
        tx_id=floor[0],
        stream_id="run-a",
        version=1,
        project_id="p",
        event_type="RunCreated",
        payload=b"{}",
        ahead_of=ahead_of,
    )
    assert cursor_key(safe_point_of(envelope)) == safe


def _keys() -> Keys:
    return Keys("aw", 1)
