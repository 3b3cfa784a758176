"""From log rows to stream entries: routing, envelopes, per-shard order (pure)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import msgspec
import pytest

from awooop.core.events import DISPATCH_EVENT_TYPES
from awooop.eventlog.eventlog import RecordedEvent
from awooop.streams.envelope import decode_envelope
from awooop.streams.keys import Keys
from awooop.streams.publish import (
    BOTH,
    EVENTS_ONLY,
    WORK_ONLY,
    by_shard,
    envelope_of,
    route_of,
    routes_of,
)
from awooop.streams.tracing import sampled

KEYS = Keys("aw", 4)
AT = datetime(2026, 1, 1, tzinfo=UTC)


def row(position: int, project: str, event_type: str, **metadata: object) -> RecordedEvent:
    return RecordedEvent(
        position=position,
        tx_id=1000 + position,
        event_id=uuid.uuid4(),
        stream_id=f"run-{project}",
        version=position,
        project_id=project,
        event_type=event_type,
        data='{"type":"' + event_type + '"}',
        metadata=dict(metadata),
        recorded_at=AT,
    )


def test_dispatch_events_go_to_both_streams_the_rest_to_events_only() -> None:
    for event_type in DISPATCH_EVENT_TYPES:
        assert route_of(event_type) == BOTH
    for event_type in ("RunClaimed", "StepCompleted", "RunCompleted", "RevisionActivated"):
        assert route_of(event_type) == EVENTS_ONLY
    # A failure marked dead_letter too: its dead letter is a Postgres row, not a stream entry.
    assert route_of("RunFailed") == EVENTS_ONLY


def at(event: RecordedEvent, **fields: object) -> RecordedEvent:
    return msgspec.structs.replace(event, **fields)


def test_a_dispatch_event_its_own_transaction_claimed_at_once_tells_no_worker() -> None:
    """A worker's own fired sleep (fire_claim.sql): TimerFired then RunClaimed at the next
    version of the same stream in the same transaction. Anything less is dispatched as before:
    a claim in another transaction, of another stream, at another version, or not in the
    batch."""
    fired = at(row(1, "p1", "TimerFired"), version=4, tx_id=77)
    claimed = at(row(2, "p1", "RunClaimed"), version=5, tx_id=77)
    assert routes_of([fired, claimed]) == [EVENTS_ONLY, EVENTS_ONLY]
    assert routes_of([fired]) == [BOTH]  # the batch ended between them
    assert routes_of([fired, at(claimed, tx_id=78)]) == [BOTH, EVENTS_ONLY]
    assert routes_of([fired, at(claimed, stream_id="run-p2")]) == [BOTH, EVENTS_ONLY]
    assert routes_of([fired, at(claimed, version=6)]) == [BOTH, EVENTS_ONLY]
    created = at(row(3, "p1", "RunCreated"), stream_id="run-x", version=1, tx_id=90)
    assert routes_of([created, fired, claimed]) == [BOTH, EVENTS_ONLY, EVENTS_ONLY]
    entries = by_shard([fired, claimed, created], KEYS)
    assert [r for shard in entries.values() for r, _ in shard] == [EVENTS_ONLY] * 2 + [BOTH]
    assert {
        r for r, _ in by_shard([fired, claimed], KEYS, route=WORK_ONLY)[KEYS.shard_of("p1")]
    } == {WORK_ONLY}


def test_the_envelope_carries_the_row_and_its_trace_context() -> None:
    event = row(7, "p1", "RunCreated", traceparent="00-aa-bb-01", tracestate="x=1", other=3)
    envelope = envelope_of(event, attempt=1)
    assert (envelope.event_id, envelope.position, envelope.tx_id) == (event.event_id, 7, 1007)
    assert (envelope.stream_id, envelope.version, envelope.project_id) == ("run-p1", 7, "p1")
    assert envelope.payload == b'{"type":"RunCreated"}'
    assert (envelope.traceparent, envelope.tracestate) == ("00-aa-bb-01", "x=1")
    assert envelope.attempt == 1
    assert envelope.recorded_at == AT.timestamp()
    # Trace context of the wrong type is ignored, not passed on.
    assert envelope_of(row(1, "p1", "RunCreated", traceparent=5)).traceparent is None


def test_by_shard_keeps_log_order_within_each_shard() -> None:
    rows = [
        row(i, f"proj{i % 5}", "RunCreated" if i % 3 == 0 else "StepCompleted") for i in range(30)
    ]
    grouped = by_shard(rows, KEYS)
    assert sum(len(items) for items in grouped.values()) == 30
    for shard, items in grouped.items():
        envelopes = [decode_envelope(data) for _, data in items]
        assert all(KEYS.shard_of(e.project_id) == shard for e in envelopes)
        positions = [e.position for e in envelopes]
        assert positions == sorted(positions)
        assert [route for route, _ in items] == [route_of(e.event_type) for e in envelopes]
    forced = by_shard(rows, KEYS, route=WORK_ONLY)
    assert {route for items in forced.values() for route, _ in items} == {WORK_ONLY}


@pytest.mark.parametrize(
    ("traceparent", "expected"),
    [
        ("00-" + "ab" * 16 + "-" + "cd" * 8 + "-01", True),
        ("00-" + "ab" * 16 + "-" + "cd" * 8 + "-03", True),  # sampled + random trace id
        ("00-" + "ab" * 16 + "-" + "cd" * 8 + "-00", False),
        ("00-" + "ab" * 16 + "-" + "cd" * 8 + "-zz", False),
        ("00-short-01", False),
        (None, False),
        (17, False),
    ],
)
def test_only_sampled_traces_get_a_relay_span(traceparent: object, expected: bool) -> None:
    assert sampled(traceparent) is expected
