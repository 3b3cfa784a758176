"""Cron in a schedule's time zone (awooop/schedules/cron.py): parsing, the shortest gap, and
fire times across both daylight saving transitions of Europe/Madrid and America/New_York,
checked against a brute-force reading of the documented rules (every UTC minute for crons on
elapsed time, every local wall-clock minute for the others)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from awooop.core.errors import ScheduleCronError, ScheduleTimezoneError
from awooop.schedules import cron

MADRID, NEW_YORK = "Europe/Madrid", "America/New_York"
# The transition days of 2025: (zone, spring forward, fall back).
DAYS = {
    MADRID: (datetime(2025, 3, 30), datetime(2025, 10, 26)),
    NEW_YORK: (datetime(2025, 3, 9), datetime(2025, 11, 2)),
}
MINUTE = timedelta(minutes=1)


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]  # year, month, day, ...


def fires_between(text: str, zone: str, start: datetime, end: datetime) -> list[datetime]:
    """Every fire time in (start, end], by next_fire."""
    found: list[datetime] = []
    moment = start
    while True:
        moment = cron.next_fire(text, zone, moment)
        if moment > end:
            return found
        found.append(moment)


def exists(naive: datetime, zone: ZoneInfo) -> bool:
    local = naive.replace(tzinfo=zone)
    return local.astimezone(UTC).astimezone(zone).replace(tzinfo=None) == naive


def oracle(text: str, zone_name: str, start: datetime, end: datetime) -> list[datetime]:
    """The documented rules, minute by minute (for crons of fixed minutes and hours, every day)."""
    spec = cron.parse_cron(text)
    zone = ZoneInfo(zone_name)
    found: set[datetime] = set()
    if spec.elapsed:
        moment = start.replace(second=0, microsecond=0)
        while moment <= end:
            local = moment.astimezone(zone)
            if local.minute in spec.minutes and local.hour in spec.hours:
                found.add(moment)
            moment += MINUTE
    else:
        naive = start.astimezone(zone).replace(tzinfo=None, second=0) - timedelta(days=1)
        last = end.astimezone(zone).replace(tzinfo=None) + timedelta(days=1)
        while naive <= last:
            if naive.minute in spec.minutes and naive.hour in spec.hours:
                valid = naive
                while not exists(valid, zone):  # spring forward: the first valid instant after
                    valid += MINUTE
                found.add(valid.replace(tzinfo=zone, fold=0).astimezone(UTC))  # fall back: 1st
            naive += MINUTE
    return sorted(t for t in found if start < t <= end)


CRONS = (
    "30 2 * * *",
    "0 2 * * *",
    "30 1 * * *",
    "0,30 2,3 * * *",
    "45 1,2,3 * * *",
    "59 1 * * *",
    "30 * * * *",
    "*/15 * * * *",
    "* * * * *",
    "*/7 1-3 * * *",
    "0 */2 * * *",
)


@pytest.mark.parametrize("zone", [MADRID, NEW_YORK])
@pytest.mark.parametrize("text", CRONS)
def test_fire_times_across_both_transitions_follow_the_rules(zone: str, text: str) -> None:
    for day in DAYS[zone]:
        start = day.replace(tzinfo=ZoneInfo(zone)).astimezone(UTC) - timedelta(hours=2)
        end = start + timedelta(hours=30)
        assert fires_between(text, zone, start, end) == oracle(text, zone, start, end), (day, text)


def test_a_local_0230_fires_once_on_both_transition_days_in_madrid() -> None:
    spring = fires_between("30 2 * * *", MADRID, utc(2025, 3, 29, 12), utc(2025, 3, 30, 12))
    # 02:30 does not exist: once, at the first valid instant after it (03:00 CEST = 01:00 UTC).
    assert spring == [utc(2025, 3, 30, 1, 0)]
    assert cron.local_text(spring[0], MADRID) == "2025-03-30T03:00:00+02:00"
    fall = fires_between("30 2 * * *", MADRID, utc(2025, 10, 25, 12), utc(2025, 10, 26, 12))
    # 02:30 occurs twice: once, at the first occurrence (02:30 CEST = 00:30 UTC).
    assert fall == [utc(2025, 10, 26, 0, 30)]
    assert cron.local_text(fall[0], MADRID) == "2025-10-26T02:30:00+02:00"


def test_new_yorks_skipped_and_repeated_times_fire_once() -> None:
    spring = fires_between("30 2 * * *", NEW_YORK, utc(2025, 3, 8, 12), utc(2025, 3, 9, 20))
    assert spring == [utc(2025, 3, 9, 7, 0)]  # 03:00 EDT
    fall = fires_between("30 1 * * *", NEW_YORK, utc(2025, 11, 1, 12), utc(2025, 11, 2, 20))
    assert fall == [utc(2025, 11, 2, 5, 30)]  # 01:30 EDT, the first of the two


def test_an_hourly_cron_stays_hourly_in_real_time_across_both_transitions() -> None:
    spring = fires_between("30 * * * *", MADRID, utc(2025, 3, 29, 23), utc(2025, 3, 30, 3))
    assert spring == [utc(2025, 3, 29, 23, 30) + timedelta(hours=h) for h in range(4)]
    fall = fires_between("30 * * * *", MADRID, utc(2025, 10, 25, 22), utc(2025, 10, 26, 3))
    locals_ = [cron.local_text(t, MADRID)[11:] for t in fall]
    assert locals_ == [
        "00:30:00+02:00",
        "01:30:00+02:00",
        "02:30:00+02:00",
        "02:30:00+01:00",  # the repeated hour fires again on elapsed time
        "03:30:00+01:00",
    ]


def test_next_fire_is_strictly_after_and_in_utc() -> None:
    at = utc(2025, 6, 1, 10, 0)
    assert cron.next_fire("0 * * * *", "UTC", at) == utc(2025, 6, 1, 11, 0)
    assert cron.next_fire("0 * * * *", "UTC", at - timedelta(microseconds=1)) == at
    assert cron.next_fire("0 12 * * *", MADRID, at).tzinfo is UTC
    # inside the repeated hour: a wall-clock time whose first occurrence has passed is not again
    second_0240 = utc(2025, 10, 26, 1, 40)  # 02:40 CET, the second 02:40
    assert cron.next_fire("50 2 * * *", MADRID, second_0240) == utc(2025, 10, 27, 1, 50)
    with pytest.raises(ValueError, match="aware"):
        cron.next_fire("* * * * *", "UTC", datetime(2025, 1, 1))  # naive: refused


def test_names_lists_ranges_and_steps() -> None:
    monday = utc(2025, 6, 2, 0, 0)  # a Monday
    assert cron.upcoming("0 9 * * MON-FRI", "UTC", monday, 6) == [
        utc(2025, 6, d, 9) for d in (2, 3, 4, 5, 6, 9)
    ]
    assert cron.upcoming("15,45 8-10/2 1 jan,jul *", "UTC", monday, 4) == [
        utc(2025, 7, 1, 8, 15),
        utc(2025, 7, 1, 8, 45),
        utc(2025, 7, 1, 10, 15),
        utc(2025, 7, 1, 10, 45),
    ]
    assert cron.upcoming("0 0 * * 7", "UTC", monday, 1) == [utc(2025, 6, 8)]  # 7 is Sunday
    spec = cron.parse_cron("  */20   *  * *   * ")
    assert (spec.text, spec.minutes, spec.elapsed) == ("*/20 * * * *", {0, 20, 40}, True)
    assert not cron.parse_cron("5 4 * * *").elapsed


@pytest.mark.parametrize(
    ("text", "gap_s"),
    [
        ("* * * * *", 60),
        ("*/15 * * * *", 900),
        ("0 * * * *", 3600),
        ("30 2 * * *", 86400),
        ("0 9,17 * * MON-FRI", 8 * 3600),
        ("59 23 * * *", 86400),
        ("0,59 0,23 * * *", 60),  # 23:59, then 00:00 the next day
    ],
)
def test_the_shortest_gap(text: str, gap_s: int) -> None:
    assert cron.parse_cron(text).shortest_gap_s == gap_s


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("* * * *", "4 fields"),
        ("0 * * * * *", "6 fields"),
        ("", "five fields"),
        ("61 * * * *", "Bad minute"),
        ("* 24 * * *", "Bad hour"),
        ("* * 32 * *", "Bad day-of-month"),
        ("* * * 13 *", "Bad month"),
        ("* * * * 8", "Bad day-of-week"),
        ("*/0 * * * *", "Bad minute"),
        ("5-1 * * * *", "Bad minute"),
        ("0 0 30 2 *", "Bad day-of-month"),  # never fires
        ("@daily * * * *", "Bad minute"),
        ("x", "1 fields"),
    ],
)
def test_a_bad_cron_is_refused_with_its_reason(text: str, says: str) -> None:
    with pytest.raises(ScheduleCronError) as refused:
        cron.parse_cron(text)
    assert refused.value.code == "E-SCHEDULE-001" and says in refused.value.message


def test_a_cron_firing_more_often_than_the_minimum_interval_is_refused() -> None:
    assert cron.parse_cron("*/5 * * * *", min_interval_s=300).shortest_gap_s == 300
    with pytest.raises(ScheduleCronError, match="fires 120 s apart"):
        cron.parse_cron("*/2 * * * *", min_interval_s=300)
    with pytest.raises(ScheduleCronError, match="fires 60 s apart"):
        cron.parse_cron("0,1 3 * * *", min_interval_s=120)


@pytest.mark.parametrize("name", ["Mars/Olympus", "", "../../etc/passwd", "europe/madrid", 3, None])
def test_an_unknown_timezone_is_refused(name: object) -> None:
    with pytest.raises(ScheduleTimezoneError) as refused:
        cron.parse_timezone(name)
    assert refused.value.code == "E-SCHEDULE-002"


def test_known_timezones() -> None:
    for name in ("UTC", MADRID, NEW_YORK, "Asia/Kolkata"):
        assert cron.parse_timezone(name).key == name
