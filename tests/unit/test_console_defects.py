"""The console's and ``awooop runs``' small pure rules: steps in the order they ran,
attempts past the limit, unknown deliveries, times labelled UTC."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from awooop.http.console_render import attempts, deliveries, when
from awooop.projections.timeline import TimelineLine, steps_in_run_order

AT = datetime(2026, 12, 4, 12, 0, 1, tzinfo=UTC)


def line(version: int, event_type: str, **detail: Any) -> TimelineLine:
    return TimelineLine(
        version=version,
        at=AT,
        event_type=event_type,
        attempt=1,
        worker_id=None,
        trace_id=None,
        actor=None,
        detail=detail,
    )


def test_steps_come_in_the_order_they_ran_not_in_jsonb_key_order() -> None:
    # jsonb orders keys shorter first: "zz" before "reserve" before "a-long-step".
    stored = {"zz": {"attempt": 1}, "reserve": {"attempt": 1}, "a-long-step": {"attempt": 2}}
    lines = [
        line(1, "RunCreated"),
        line(3, "StepCompleted", step="reserve"),
        line(4, "StepCompleted", step="a-long-step"),
        line(6, "StepCompleted", step="zz"),
    ]
    assert list(steps_in_run_order(stored, lines)) == ["reserve", "a-long-step", "zz"]


def test_a_step_done_again_counts_where_it_last_ran_and_unknown_steps_go_last() -> None:
    stored = {"b": 1, "a": 2, "ghost": 3}
    lines = [
        line(2, "StepCompleted", step="a"),
        line(3, "StepCompleted", step="b"),
        line(7, "StepCompleted", step="a"),
    ]
    assert list(steps_in_run_order(stored, lines)) == ["b", "a", "ghost"]
    assert steps_in_run_order(stored, lines)["a"] == 2


def test_attempts_past_the_limit_say_by_how_many_and_why() -> None:
    assert attempts(2, 3) == ("2 of 3", "")
    assert attempts(3, 3) == ("3 of 3", "")
    shown, why = attempts(4, 3)
    assert shown == "4 of 3 (+1)"
    assert "1 claim(s) past the limit of 3" in why and "charged" in why


def test_deliveries_unknown_is_a_dash_not_zero() -> None:
    assert deliveries(0) == "-"
    assert deliveries(7) == "7"


def test_times_are_labelled_utc() -> None:
    assert when(AT) == "2026-12-04 12:00:01 UTC"
    plus_two = AT.astimezone(timezone(timedelta(hours=2)))
    assert when(plus_two) == "2026-12-04 12:00:01 UTC"
    assert when(None) == "-"
