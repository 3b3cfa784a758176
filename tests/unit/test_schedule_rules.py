"""What a fire does (awooop/schedules/rules.py): every catch-up policy after an outage, the
window, the cap, the grace, jitter (deterministic, bounded, the same everywhere), fire keys,
and the checks of a schedule's definition (each refusal with its code)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from awooop.core.errors import AwoooPError
from awooop.schedules import rules
from awooop.schedules.rules import CatchUp

MADRID = "Europe/Madrid"
SID = uuid.UUID("2f1e0c8a-4b7d-4e55-9a3c-0d6f1b2a3c4d")


def at(hour: int, minute: int, second: int = 0) -> datetime:
    return datetime(2025, 6, 1, hour, minute, second, tzinfo=UTC)


def minutes(first: datetime, count: int) -> tuple[datetime, ...]:
    return tuple(first + timedelta(minutes=i) for i in range(count))


# --- catch-up -----------------------------------------------------------------------------------


def ten_minute_outage(policy: str, **kw: Any) -> rules.Due:
    """Every minute; the loops fired 12:00 and were down until 12:10:30."""
    return rules.missed("* * * * *", "UTC", at(12, 1), at(12, 10, 30), policy, 3600, **kw)


def test_latest_fires_only_the_most_recent_missed_time() -> None:
    due = ten_minute_outage("latest")
    assert due == rules.Due(fire=(at(12, 10),), passed=9, next_fire_at=at(12, 11))


def test_all_fires_every_missed_time_in_order() -> None:
    due = ten_minute_outage("all")
    assert due == rules.Due(fire=minutes(at(12, 1), 10), passed=0, next_fire_at=at(12, 11))


def test_skip_fires_none_and_goes_on_at_the_next_future_time() -> None:
    due = ten_minute_outage("skip")
    assert due == rules.Due(fire=(), passed=10, next_fire_at=at(12, 11))


@pytest.mark.parametrize("policy", list(CatchUp))
def test_a_fire_time_seen_within_the_grace_is_on_time_under_every_policy(policy: str) -> None:
    due = rules.missed("* * * * *", "UTC", at(12, 10), at(12, 10, 14), policy, 3600, grace_s=15)
    assert due == rules.Due(fire=(at(12, 10),), passed=0, next_fire_at=at(12, 11))
    late = rules.missed("* * * * *", "UTC", at(12, 10), at(12, 10, 16), policy, 3600, grace_s=15)
    assert late.fire == (() if policy == "skip" else (at(12, 10),))


def test_skip_still_fires_the_time_that_is_on_time_after_an_outage() -> None:
    # down from 12:00:30 to 12:10:05: 12:01 to 12:09 were missed, 12:10 is on time
    due = rules.missed("* * * * *", "UTC", at(12, 1), at(12, 10, 5), "skip", 3600)
    assert due == rules.Due(fire=(at(12, 10),), passed=9, next_fire_at=at(12, 11))


def test_nothing_due_yet_fires_nothing_and_keeps_the_next_time() -> None:
    due = rules.missed("* * * * *", "UTC", at(12, 1), at(12, 0, 59), "all", 3600)
    assert due == rules.Due(fire=(), passed=0, next_fire_at=at(12, 1))


def test_the_window_bounds_what_all_and_latest_catch_up() -> None:
    # every minute, down from 10:00 to 12:10:30, window 1 h: 11:11 to 12:10 are within it
    due = rules.missed("* * * * *", "UTC", at(10, 1), at(12, 10, 30), "all", 3600)
    assert due.fire == minutes(at(11, 11), 60) and due.next_fire_at == at(12, 11)
    hourly = rules.missed("0 * * * *", "UTC", at(9, 0), at(12, 30), "latest", 20 * 60)
    # 12:00 is older than the window: passed over unseen (not counted), like 9:00 to 11:00
    assert hourly == rules.Due(fire=(), passed=0, next_fire_at=at(13, 0))
    kept = rules.missed("0 * * * *", "UTC", at(9, 0), at(12, 30), "latest", timedelta(hours=1))
    assert kept == rules.Due(fire=(at(12, 0),), passed=0, next_fire_at=at(13, 0))


def test_all_is_capped_to_the_most_recent_times() -> None:
    due = ten_minute_outage("all", cap=3)
    assert due == rules.Due(fire=minutes(at(12, 8), 3), passed=7, next_fire_at=at(12, 11))
    assert ten_minute_outage("all", cap=0).fire == ()


def test_catch_up_across_a_dst_change_uses_wall_clock_fire_times() -> None:
    # 02:30 Madrid daily; the loops were down from before the spring-forward day to 02:00 UTC
    since = datetime(2025, 3, 30, 1, 0, tzinfo=UTC)  # that day's fire time: 03:00 CEST
    now = datetime(2025, 3, 30, 2, 0, tzinfo=UTC)
    due = rules.missed("30 2 * * *", MADRID, since, now, "latest", 3600 * 2)
    assert due.fire == (since,) and due.next_fire_at == datetime(2025, 3, 31, 0, 30, tzinfo=UTC)


def test_the_jitter_delays_when_a_time_is_due_not_the_time_itself() -> None:
    delay = rules.jitter_delay(SID, at(12, 1), 50)
    assert timedelta(0) < delay < timedelta(seconds=50)
    early = rules.missed(
        "* * * * *",
        "UTC",
        at(12, 1),
        at(12, 1) + delay / 2,
        "all",
        3600,
        schedule_id=SID,
        jitter_s=50,
    )
    assert early == rules.Due(fire=(), passed=0, next_fire_at=at(12, 1))
    due = rules.missed(
        "* * * * *",
        "UTC",
        at(12, 1),
        at(12, 1) + delay,
        "all",
        3600,
        schedule_id=SID,
        jitter_s=50,
    )
    assert due.fire == (at(12, 1),)


def test_a_long_outage_is_not_walked_from_its_start() -> None:
    # a year of every-minute fire times behind; only the window's are looked at
    start = datetime(2024, 6, 1, tzinfo=UTC)
    due = rules.missed("* * * * *", "UTC", start, at(12, 0, 30), "skip", 600)
    assert due.fire == () and due.next_fire_at == at(12, 1) and due.passed <= 11


# --- jitter and keys ------------------------------------------------------------------------------


def test_jitter_is_deterministic_bounded_and_spread() -> None:
    times = [at(0, 0) + timedelta(minutes=i) for i in range(500)]
    delays = [rules.jitter_delay(SID, t, 30) for t in times]
    assert delays == [rules.jitter_delay(SID, t, 30) for t in times]  # the same every time
    assert all(timedelta(0) <= d < timedelta(seconds=30) for d in delays)
    assert len(set(delays)) > 450  # spread over the range, to the millisecond
    assert max(delays) > timedelta(seconds=27) and min(delays) < timedelta(seconds=3)
    # another schedule with the same cron gets other delays
    other = [rules.jitter_delay(uuid.uuid4(), t, 30) for t in times[:20]]
    assert other != delays[:20]
    assert rules.jitter_delay(SID, at(0, 0), 0) == timedelta(0)
    # fixed across processes and releases: a digest, never Python's salted hash()
    assert rules.jitter_delay(SID, at(0, 0), 30) == timedelta(milliseconds=PINNED_MS)


PINNED_MS = 1868  # sha256 of "<schedule id>/2025-06-01T00:00:00Z", modulo 30,000 ms


def test_fire_keys_round_trip() -> None:
    moment = datetime(2025, 3, 30, 3, 0, tzinfo=UTC) + timedelta(microseconds=5)
    key = rules.fire_key(SID, moment.astimezone(UTC))
    assert key == f"schedule:{SID}:2025-03-30T03:00:00Z"
    assert rules.parse_fire_key(key) == (SID, datetime(2025, 3, 30, 3, 0, tzinfo=UTC))
    for other in (None, "", "order-42", "schedule:nope:2025", f"schedule:{SID}:yesterday"):
        assert rules.parse_fire_key(other) is None


# --- the definition -----------------------------------------------------------------------------

GOOD: dict[str, Any] = {
    "cron_text": "*/5 * * * *",
    "timezone": MADRID,
    "contract_id": "nightly",
    "input": {"report": "daily"},
}


def test_a_definition_with_defaults_and_with_every_option() -> None:
    plain = rules.define(**GOOD)
    assert (plain.catch_up, plain.catch_up_window_s, plain.overlap, plain.jitter_s) == (
        "latest",
        3600,
        "skip",
        0,
    )
    full = rules.define(
        **{**GOOD, "cron_text": "0  3 * * *"},
        catch_up="all",
        catch_up_window="1h30m",
        overlap="cancel_previous",
        jitter="2m",
    )
    assert (full.cron, full.catch_up, full.catch_up_window_s, full.overlap, full.jitter_s) == (
        "0 3 * * *",
        "all",
        5400,
        "cancel_previous",
        120,
    )


@pytest.mark.parametrize(
    ("given", "code"),
    [
        ({"cron_text": "* * *"}, "E-SCHEDULE-001"),
        ({"cron_text": "*/1 * * * *", "min_interval_s": 120}, "E-SCHEDULE-001"),
        ({"timezone": "Europe/Atlantis"}, "E-SCHEDULE-002"),
        ({"catch_up": "some"}, "E-SCHEDULE-003"),
        ({"catch_up": None}, "E-SCHEDULE-003"),
        ({"overlap": "queue"}, "E-SCHEDULE-003"),
        ({"catch_up_window": "30s"}, "E-SCHEDULE-003"),
        ({"catch_up_window": "8d"}, "E-SCHEDULE-003"),
        ({"catch_up_window": "1 hour"}, "E-SCHEDULE-003"),
        ({"catch_up_window": -60}, "E-SCHEDULE-003"),
        ({"jitter": "6m"}, "E-SCHEDULE-003"),  # longer than the 5-minute gap
        ({"jitter": "soon"}, "E-SCHEDULE-003"),
        ({"jitter": True}, "E-SCHEDULE-003"),
        ({"contract_id": "no spaces"}, "E-INPUT-001"),
        ({"input": {"text": "nul \x00"}}, "E-INPUT-001"),
        ({"input": "x" * 70_000}, "E-INPUT-001"),
        ({"input": {"when": object()}}, "E-INPUT-001"),
    ],
)
def test_a_bad_definition_is_refused_with_its_code(given: dict[str, Any], code: str) -> None:
    with pytest.raises(AwoooPError) as refused:
        rules.define(**{**GOOD, **given})
    assert refused.value.code == code, refused.value.message


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), (90, 90), ("30s", 30), ("5m", 300), ("1h", 3600), ("1h30m", 5400), ("2d", 172800)],
)
def test_durations(text: object, seconds: int) -> None:
    assert rules.parse_duration(text, "jitter") == seconds


def test_runs_show_names_the_schedule_and_fire_time_of_a_scheduled_run() -> None:
    from msgspec.structs import replace

    from awooop.commands.runs_render import render_state, state_view
    from awooop.eventlog.state import apply
    from tests.support import factories

    fire_time = datetime(2025, 3, 30, 1, 0, tzinfo=UTC)
    event = replace(factories.created(), provider_event_id=rules.fire_key(SID, fire_time))
    view = state_view(apply(None, event))
    assert view["schedule"] == {"schedule_id": str(SID), "fire_time": "2025-03-30T01:00:00Z"}
    assert "2025-03-30T01:00:00Z" in render_state(apply(None, event))
    assert "schedule" not in state_view(apply(None, factories.created()))
