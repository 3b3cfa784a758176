"""The run page's waterfall and timeline views: pure folds of a run's timeline lines."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from starlette.requests import Request

from awooop.http import console_live
from awooop.http import console_session as sessions
from awooop.http.console_timeline import event_filter, view, when_ms
from awooop.http.console_waterfall import Bar, duration_text, grouped, waterfall
from awooop.projections.timeline import TimelineLine

T0 = datetime(2026, 12, 5, 12, 0, 0, tzinfo=UTC)


def at(ms: float) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def line(version: int, ms: float, event_type: str, attempt: int = 1, **detail: Any) -> TimelineLine:
    return TimelineLine(
        version=version,
        at=at(ms),
        event_type=event_type,
        attempt=attempt,
        worker_id="host:1:w1" if attempt else None,
        trace_id=None,
        actor=None,
        detail=detail,
    )


def completed_run() -> list[TimelineLine]:
    return [
        line(1, 0, "RunCreated", attempt=0),
        line(2, 100, "RunClaimed"),
        line(3, 300, "StepCompleted", step="reserve"),
        line(
            4,
            900,
            "ModelCalled",
            started_at=at(400).isoformat(),
            duration_ms=450.0,
            model="m1",
            outcome="ok",
        ),
        line(5, 1000, "StepCompleted", step="charge", started_at=at(950).isoformat()),
        line(6, 1100, "ToolWaitStarted", tool="shipping"),
        line(7, 1600, "ToolResultReceived", tool="shipping"),
        line(8, 2000, "RunCompleted"),
    ]


def by_label(bars: list[Bar]) -> dict[str, Bar]:
    return {b.label: b for b in bars}


def test_a_completed_run_has_a_bar_per_attempt_step_model_call_and_tool_wait() -> None:
    shown = waterfall(completed_run(), at(60_000), finished=True)
    assert shown is not None
    bars = by_label(shown.bars)
    assert set(bars) == {"attempt 1", "reserve", "m1", "charge", "shipping"}
    assert (bars["attempt 1"].start, bars["attempt 1"].end) == (at(100), at(2000))
    assert bars["attempt 1"].outcome == "RunCompleted" and not bars["attempt 1"].running
    # No started_at: the step ran since the attempt's previous event (the claim).
    assert (bars["reserve"].start, bars["reserve"].end) == (at(100), at(300))
    # With started_at (StepCompleted carries it once written by a release that records it).
    assert bars["charge"].start == at(950) and bars["charge"].duration_ms == 50
    assert bars["m1"].start == at(400) and bars["m1"].duration_ms == 450
    assert bars["shipping"].duration_ms == 500 and bars["shipping"].outcome == "received"
    # A finished run's axis ends at its last event, not at "now"; positions are percentages.
    assert shown.end == at(2000) and shown.duration_ms == 2000
    assert bars["attempt 1"].left == 5.0 and bars["attempt 1"].width == 95.0
    assert bars["m1"].left == 20.0 and bars["m1"].width == 22.5
    assert [label for _, label in shown.ticks] == ["+0 ms", "+500 ms", "+1.0 s", "+1.5 s", "+2.0 s"]


def test_open_bars_reach_now_and_are_running() -> None:
    lines = [
        line(1, 0, "RunCreated", attempt=0),
        line(2, 100, "RunClaimed"),
        line(3, 200, "ApprovalRequested", expires_at="x"),
    ]
    shown = waterfall(lines, at(10_200), finished=False)
    assert shown is not None
    bars = by_label(shown.bars)
    assert bars["attempt 1"].end == at(200) and not bars["attempt 1"].running
    assert bars["attempt 1"].outcome == "ApprovalRequested"  # the lease is given back
    assert bars["approval"].end == at(10_200) and bars["approval"].running
    assert shown.end == at(10_200)

    granted = [
        *lines,
        line(4, 5000, "ApprovalGranted", actor="ann"),
        line(5, 5100, "RunClaimed", attempt=2),
    ]
    shown = waterfall(granted, at(10_000), finished=False)
    assert shown is not None
    bars = by_label(shown.bars)
    assert bars["approval"].outcome == "granted" and bars["approval"].duration_ms == 4800
    assert bars["attempt 2"].running and bars["attempt 2"].end == at(10_000)


def test_an_attempt_requeued_closes_its_tool_wait_and_the_next_claim_opens_another() -> None:
    lines = [
        line(1, 0, "RunCreated", attempt=0),
        line(2, 10, "RunClaimed"),
        line(3, 20, "ToolWaitStarted", tool="slow"),
        line(4, 5000, "RunRequeued"),
        line(5, 5010, "RunClaimed", attempt=2),
        line(6, 5020, "RunFailed", attempt=2, reason="boom", code="E-TEST-001"),
    ]
    shown = waterfall(lines, at(99_999), finished=True)
    assert shown is not None
    kinds = [(b.kind, b.label, b.outcome) for b in shown.bars]
    assert kinds == [
        ("attempt", "attempt 1", "RunRequeued"),
        ("tool", "slow", "RunRequeued"),
        ("attempt", "attempt 2", "RunFailed"),
    ]
    assert not any(b.running for b in shown.bars)


def test_thousands_of_steps_are_grouped_and_the_bars_capped() -> None:
    lines = [line(1, 0, "RunCreated", attempt=0), line(2, 1, "RunClaimed")]
    lines += [line(3 + i, 2 + i, "StepCompleted", step=f"s{i}") for i in range(5000)]
    shown = waterfall(lines, at(10_000), finished=False)
    assert shown is not None
    steps = [b for b in shown.bars if b.kind == "step"]
    assert len(steps) == 40 and sum(b.count for b in steps) == 5000
    assert steps[0].label == "s0 … s124" and steps[0].count == 125
    capped = waterfall(lines, at(10_000), finished=False, max_bars=10)
    assert capped is not None and len(capped.bars) == 10 and capped.omitted == 31
    assert all(0 <= b.left <= 100 and 0 < b.width <= 100 for b in shown.bars)


def test_grouping_keeps_few_bars_as_they_are() -> None:
    bars = [Bar("step", f"s{i}", 1, i, at(i), at(i + 1)) for i in range(5)]
    assert grouped(bars, per_attempt=5) == bars
    assert [b.count for b in grouped(bars, per_attempt=2)] == [3, 2]


def test_no_line_no_waterfall() -> None:
    assert waterfall([], T0, finished=False) is None


def test_durations_read_as_people_read_them() -> None:
    assert duration_text(0.4) == "0 ms"
    assert duration_text(850) == "850 ms"
    assert duration_text(12_345) == "12.3 s"
    assert duration_text(245_000) == "4 min 05 s"
    assert duration_text(2 * 3600_000 + 180_000) == "2 h 03 min"
    assert when_ms(at(1234.5)) == "2026-12-05 12:00:01.234 UTC"


def test_the_timeline_is_one_section_per_attempt_with_runs_of_one_type_grouped() -> None:
    lines = [line(1, 0, "RunCreated", attempt=0), line(2, 100, "RunClaimed")]
    lines += [line(3 + i, 200 + i * 10, "StepCompleted", step=f"s{i}") for i in range(4)]
    lines += [
        line(7, 400, "RunRequeued"),
        line(8, 500, "RunClaimed", attempt=2),
        line(9, 750, "RunCompleted", attempt=2),
    ]
    shown = view(lines)
    assert [s.attempt for s in shown.sections] == [0, 1, 2]
    assert [(g.event_type, len(g.rows)) for g in shown.sections[1].groups] == [
        ("RunClaimed", 1),
        ("StepCompleted", 4),
        ("RunRequeued", 1),
    ]
    assert shown.sections[1].groups[1].span_ms == 30
    rows = [r for s in shown.sections for g in s.groups for r in g.rows]
    assert rows[0].since_ms is None and rows[-1].since_ms == 250
    assert shown.sections[2].span_ms == 250 and shown.version == 9
    assert all(s.open for s in shown.sections)  # a short timeline is all open
    assert shown.types == sorted({ln.event_type for ln in lines})


def test_the_filter_keeps_types_and_the_time_since_the_runs_previous_event() -> None:
    lines = completed_run()
    chosen = event_filter(["StepCompleted,ModelCalled", "Nope", ""])
    assert chosen == {"StepCompleted", "ModelCalled"}
    shown = view(lines, chosen)
    rows = [r for s in shown.sections for g in s.groups for r in g.rows]
    assert [r.line.version for r in rows] == [3, 4, 5]
    assert [r.since_ms for r in rows] == [200, 600, 100]  # from the previous event, hidden or not
    assert (shown.matching, shown.total, shown.left_out) == (3, 8, 0)
    assert event_filter(["Nope"]) is None and event_filter([]) is None


def test_a_long_timeline_draws_its_newest_rows_and_folds_all_but_the_last_attempt() -> None:
    lines = [line(1, 0, "RunCreated", attempt=0)]
    lines += [line(2 + i, 1 + i, "RunClaimed", attempt=1 + i) for i in range(100)]
    shown = view(lines, max_rows=80)
    assert shown.left_out == 21 and shown.sections[0].attempt == 21
    assert [s.open for s in shown.sections] == [False] * 79 + [True]


def test_a_run_page_tag_names_the_version_status_clock_slice_and_who_looks() -> None:
    tag = console_live.run_etag(5, "RUNNING", at(0), final=False, context="manage|c|")
    assert tag == console_live.run_etag(5, "RUNNING", at(1), final=False, context="manage|c|")
    assert tag != console_live.run_etag(6, "RUNNING", at(1), final=False, context="manage|c|")
    assert tag != console_live.run_etag(5, "RUNNING", at(1), final=False, context="read|c|")
    assert tag != console_live.run_etag(5, "RUNNING", at(60_000), final=False, context="manage|c|")
    done = console_live.run_etag(9, "COMPLETED", at(0), final=True, context="manage|c|")
    assert done == console_live.run_etag(
        9, "COMPLETED", at(600_000), final=True, context="manage|c|"
    )
    assert tag.startswith('"') and tag.endswith('"')


def asking(headers: dict[str, str], cookie: str = "") -> Request:
    raw = [(k.encode(), v.encode()) for k, v in headers.items()]
    if cookie:
        raw.append((b"cookie", cookie.encode()))
    return Request({"type": "http", "method": "GET", "path": "/ui/runs", "headers": raw})


def test_a_page_is_unchanged_when_the_browser_names_its_tag() -> None:
    tag = console_live.body_etag(b"<p>page</p>")
    assert console_live.matches(asking({"if-none-match": tag}), tag)
    assert console_live.matches(asking({"if-none-match": f'"other", W/{tag}'}), tag)
    assert not console_live.matches(asking({"if-none-match": '"other"'}), tag)
    assert not console_live.matches(asking({}), tag)
    # A notice to show once is always served.
    notice = f"{sessions.NOTICE_COOKIE}=done"
    assert not console_live.matches(asking({"if-none-match": tag}, notice), tag)


def test_the_step_a_running_attempt_reported_is_a_running_bar_to_now() -> None:
    lines = [
        line(1, 0, "RunCreated", attempt=0),
        line(2, 100, "RunClaimed"),
        line(3, 300, "StepCompleted", step="reserve"),
    ]
    shown = waterfall(lines, at(60_300), finished=False, in_step=("charge", at(400)))
    assert shown is not None
    bars = by_label(shown.bars)
    assert bars["charge"].running and bars["charge"].kind == "step"
    assert (bars["charge"].start, bars["charge"].end) == (at(400), at(60_300))
    assert bars["charge"].attempt == 1
    # A finished run draws no reported step: the attempt that reported it is over.
    done = waterfall(lines, at(60_300), finished=True, in_step=("charge", at(400)))
    assert done is not None and "charge" not in by_label(done.bars)


def test_a_wait_for_child_runs_is_a_bar_to_the_children_finishing() -> None:
    lines = [
        line(1, 0, "RunCreated", attempt=0),
        line(2, 100, "RunClaimed"),
        line(3, 200, "WaitStarted", step="children:1", kind="children"),
        line(4, 5000, "ChildrenFinished", attempt=0, step="children:1"),
        line(5, 5100, "RunClaimed", attempt=2),
        line(6, 5200, "RunCompleted", attempt=2),
    ]
    shown = waterfall(lines, at(6000), finished=True)
    assert shown is not None
    [wait] = [b for b in shown.bars if b.kind == "wait"]
    assert (wait.label, wait.start, wait.end, wait.outcome) == (
        "children:1",
        at(200),
        at(5000),
        "children",
    )
