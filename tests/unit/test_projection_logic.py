"""Pure projection logic: the idempotency plan, folds, timeline rows, progress arithmetic."""

from __future__ import annotations

import io
import itertools
import uuid
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from awooop.core.errors import ProjectionStreamError
from awooop.core.events import (
    RUN_STREAM_PREFIX,
    RevisionActivated,
    RevisionCreated,
    run_stream_id,
)
from awooop.core.ids import new_run_id, uuid7
from awooop.eventlog.state import apply, fold
from awooop.projections import progress, revisions, timeline
from awooop.projections.base import LogEvent, check_consecutive, plan, stream_range, trace_id_of
from awooop.projections.bulk import split_range
from awooop.projections.run_state import count_deltas, fold_run
from awooop.projections.schema import MAX_IDENTIFIER, old_name, shadow_name
from tests.support.factories import PATHS, T0, created, event_for
from tests.support.logcapture import capture_context_logs

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE}-00f067aa0ba902b7-01"


def log_events(names: Sequence[str], stream_id: str | None = None) -> list[LogEvent]:
    """A legal run history as log events (versions 1..n)."""
    first = created()
    sid = stream_id or run_stream_id(first.run_id)
    state = None
    out = []
    for version, name in enumerate(names, start=1):
        event = first if name == "RunCreated" else event_for(name, state)
        state = apply(state, event)
        out.append(
            LogEvent(
                stream_id=sid,
                version=version,
                project_id="p1",
                position=100 + version,
                event_type=name,
                event=event,
                traceparent=TRACEPARENT,
            )
        )
    return out


# --- plan ------------------------------------------------------------------------------------


def test_plan_applies_the_next_versions() -> None:
    assert plan(3, [4, 5]).apply == (4, 5)
    assert plan(0, [1]).apply == (1,)


def test_plan_treats_old_and_repeated_versions_as_no_ops() -> None:
    decision = plan(5, [3, 5, 6, 6])
    assert decision.apply == (6,) and decision.duplicates == (3, 5) and decision.fill_after is None
    assert plan(5, [5, 2]).apply == ()


def test_plan_fills_a_gap_instead_of_skipping() -> None:
    decision = plan(2, [5, 3])
    assert decision.apply == () and decision.fill_after == 2
    assert plan(0, [2]).fill_after == 0


@given(stored=st.integers(0, 20), delivered=st.lists(st.integers(1, 30), max_size=12))
def test_plan_never_applies_a_version_twice_or_out_of_order(
    stored: int, delivered: list[int]
) -> None:
    decision = plan(stored, delivered)
    assert list(decision.apply) == list(range(stored + 1, stored + 1 + len(decision.apply)))
    assert all(v <= stored for v in decision.duplicates)
    fresh = {v for v in delivered if v > stored}
    assert (decision.fill_after is not None) == (bool(fresh) and not decision.apply)


def test_check_consecutive_refuses_a_hole() -> None:
    events = log_events(["RunCreated", "RunClaimed", "StepCompleted"])
    check_consecutive(0, events)
    with pytest.raises(ProjectionStreamError):
        check_consecutive(0, [events[0], events[2]])
    with pytest.raises(ProjectionStreamError):
        check_consecutive(1, events)


# --- run state and counts --------------------------------------------------------------------


@pytest.mark.parametrize("status", sorted(PATHS))
def test_fold_run_is_the_state_machine_fold(status: str) -> None:
    events = log_events(PATHS[status])  # type: ignore[index]  # RunStatus is a str enum
    assert fold_run(None, events) == fold([e.event for e in events])
    assert fold_run(fold_run(None, events[:1]), events[1:]) == fold_run(None, events)


def test_count_deltas_move_a_run_between_states() -> None:
    events = log_events(["RunCreated", "RunClaimed", "RunCompleted"])
    pending = fold_run(None, events[:1])
    done = fold_run(pending, events[1:])
    assert count_deltas([(None, pending)]) == {("p1", "PENDING"): 1}
    assert count_deltas([(pending, done)]) == {("p1", "PENDING"): -1, ("p1", "COMPLETED"): 1}


# --- timeline and revisions ------------------------------------------------------------------


def test_timeline_rows_carry_time_attempt_worker_and_trace() -> None:
    names = ["RunCreated", "RunClaimed", "ApprovalRequested", "ApprovalGranted", "RunClaimed"]
    rows, head = timeline.entries(None, log_events(names))
    assert [r.attempt for r in rows] == [0, 1, 1, 1, 2]  # approval events keep the attempt
    assert [r.worker_id for r in rows] == [None, "worker-a", "worker-a", None, "worker-a"]
    assert {r.trace_id for r in rows} == {TRACE}
    assert rows[0].at == T0 and rows[1].detail["lease_until"]
    assert "input" not in rows[0].detail and rows[3].detail == {"actor": "alice"}
    assert head == (5, 2)


def test_trace_id_of_reads_w3c_traceparents_only() -> None:
    assert trace_id_of(TRACEPARENT) == TRACE
    assert trace_id_of(None) is None
    assert trace_id_of("garbage") is None
    assert trace_id_of(f"00-{'0' * 32}-00f067aa0ba902b7-01") is None


def test_revision_rows_name_the_revision_and_its_predecessor() -> None:
    r1, r2 = uuid.uuid4(), uuid.uuid4()
    stream = "revision-p1/agent/triage"
    events = [
        RevisionCreated(
            at=T0, revision_id=r1, contract_family="agent", contract_id="triage", body_hash="h1"
        ),
        RevisionActivated(
            at=T0,
            contract_family="agent",
            contract_id="triage",
            old_revision_id=None,
            new_revision_id=r1,
        ),
        RevisionActivated(
            at=T0,
            contract_family="agent",
            contract_id="triage",
            old_revision_id=r1,
            new_revision_id=r2,
            actor="ops",
        ),
    ]
    logged = [
        LogEvent(
            stream_id=stream,
            version=i,
            project_id="p1",
            position=i,
            event_type=type(e).__name__,
            event=e,
        )
        for i, e in enumerate(events, start=1)
    ]
    rows = revisions.entries(0, logged)
    assert [(r.event_type, r.revision_id, r.previous_revision_id) for r in rows] == [
        ("RevisionCreated", r1, None),
        ("RevisionActivated", r1, None),
        ("RevisionActivated", r2, r1),
    ]
    assert rows[0].body_hash == "h1" and rows[2].actor == "ops"
    with pytest.raises(ProjectionStreamError):
        revisions.entries(1, logged)


# --- names and ranges ------------------------------------------------------------------------


def test_stream_ranges_and_derived_names() -> None:
    low, high = stream_range(RUN_STREAM_PREFIX)
    assert low <= "run-0" < high and not low <= "runz" < high and not low <= "revision-x" < high
    long = "x" * 60
    assert len(shadow_name(long)) <= MAX_IDENTIFIER and shadow_name(long) != shadow_name(long + "y")
    assert shadow_name("awooop_run_state") == "awooop_run_state__shadow"
    assert old_name("awooop_run_state") == "awooop_run_state__old"


# --- progress --------------------------------------------------------------------------------


def test_progress_arithmetic_and_bar() -> None:
    assert progress.rate(500, 2.0) == 250 and progress.rate(5, 0) == 0
    assert progress.eta_s(250, 1000, 1.0) == 3.0
    assert progress.eta_s(0, 1000, 1.0) is None
    assert progress.format_duration(None) == "--:--"
    assert progress.format_duration(75) == "01:15"
    assert progress.format_duration(3725) == "1:02:05"
    bar = progress.format_bar("replay run_state", 250, 1000, 1.0)
    assert "25%" in bar and "250/1,000 events" in bar and "250 ev/s" in bar and "ETA 00:03" in bar


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_draws_a_bar_on_a_terminal_and_logs_otherwise() -> None:
    now = [0.0]
    tty = FakeTTY()
    bar = progress.Progress("replay x", 100, stream=tty, clock=lambda: now[0])
    now[0] = 1.0
    bar.advance(50)
    assert tty.getvalue().startswith("\r")
    assert "50%" in tty.getvalue() and "ETA 00:01" in tty.getvalue()
    now[0] = 2.0
    bar.advance(50)
    assert bar.finish() == 2.0 and tty.getvalue().endswith("\n")

    plain = io.StringIO()
    with capture_context_logs() as logs:
        lines = progress.Progress("replay x", 100, stream=plain, clock=lambda: now[0])
        now[0] = 10.0
        lines.advance(40)
        lines.finish()
    assert plain.getvalue() == ""
    assert [e["event"] for e in logs] == ["replay_progress", "replay_phase_done"]
    assert logs[0]["events_per_s"] == 5 and logs[0]["total"] == 100


def test_split_range_covers_every_stream_exactly_once() -> None:
    low, high = stream_range(RUN_STREAM_PREFIX)
    for parts in (1, 2, 3, 5, 16, 40):
        ranges = split_range(low, high, parts)
        assert ranges[0][0] == low and ranges[-1][1] == high
        assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
        for stream in (run_stream_id(uuid.uuid4()) for _ in range(50)):
            assert sum(1 for lo, hi in ranges if lo <= stream < hi) == 1
    assert len(split_range(low, high, 40)) == 16


def test_split_range_cuts_time_ordered_run_ids_evenly_by_the_histogram() -> None:
    low, high = stream_range(RUN_STREAM_PREFIX)
    start = 1_790_000_000_000
    streams = sorted(run_stream_id(uuid7(start + i * 997)) for i in range(4000))
    # Without a histogram the hex cuts put every time-ordered id in one part.
    hex_parts = split_range(low, high, 4)
    assert max(sum(lo <= s < hi for s in streams) for lo, hi in hex_parts) == len(streams)
    histogram = ["domain/x", *streams[::40], "revision/y"]  # ~100 bounds, some outside
    ranges = split_range(low, high, 4, histogram)
    assert len(ranges) == 4 and ranges[0][0] == low and ranges[-1][1] == high
    counts = [sum(lo <= s < hi for s in streams) for lo, hi in ranges]
    assert sum(counts) == len(streams) and min(counts) > 0.8 * len(streams) / 4
    assert len(split_range(low, high, 8, histogram[:5])) == 8  # too few bounds: hex cuts


def test_run_ids_are_uuid7_in_creation_order() -> None:
    early, late = uuid7(1_790_000_000_000), uuid7(1_790_000_000_001)
    assert early.version == late.version == 7 and early.variant == uuid.RFC_4122
    assert str(early) < str(late) and early.int >> 80 == 1_790_000_000_000
    assert new_run_id().version == 7
