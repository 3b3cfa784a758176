"""Cron in a schedule's time zone: when a schedule fires (pure functions).

A cron expression has five fields, minute hour day-of-month month day-of-week, each a number,
a name (``JAN``-``DEC``, ``SUN``-``SAT``), ``*``, a list (``1,15``), a range (``MON-FRI``) or a
step (``*/15``, ``8-18/2``); day-of-week 0 and 7 are Sunday. When both day fields are
restricted a day matches either; when one starts with ``*`` it must match both. Parsing and
field matching are cronsim's (a small, well-kept library whose time-zone handling is the one
below); this module adds the rules of a schedule: exactly five fields, a shortest interval,
and fire times returned in UTC, each strictly after the moment asked about.

Time zones and daylight saving time (the zone is an IANA name, read with :mod:`zoneinfo`):

- A cron whose minute or hour field starts with ``*`` (``*/5 * * * *``, ``30 * * * *``,
  ``0 */2 * * *``) runs on elapsed time: it fires at every instant whose local wall time
  matches. On the spring-forward day the skipped local hour has no instants, so nothing fires
  in it; on the fall-back day the repeated hour fires twice, once in each offset (an hourly
  cron stays hourly in real time).
- Any other cron (``30 2 * * *``, ``0 9,17 * * MON-FRI``) runs at wall-clock times. A local
  time that does not exist (spring forward: 02:30 in Europe/Madrid on the last Sunday of
  March) fires once, at the first valid instant after it (03:00 local, the end of the gap); a
  local time that occurs twice (fall back: 02:30 on the last Sunday of October) fires once, at
  its first occurrence.

These are Debian cron's rules. :func:`next_fire` is the one place that asks cronsim; every
other function is written over it.
"""

from __future__ import annotations

import functools
import itertools
import zoneinfo
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from cronsim import CronSim, CronSimError

from awooop.core.errors import ScheduleCronError, ScheduleTimezoneError

FIELDS = 5
MAX_TEXT = 200  # characters (awooop_schedules.cron's CHECK)
MAX_ZONE = 64  # characters (awooop_schedules.timezone's CHECK)
MINUTES_PER_DAY = 24 * 60
# Where a cron is first tried when it is parsed (cronsim gives up after 50 years without a
# match: a cron that matches some day matches one within 28 years of the calendar).
PROBE_FROM = datetime(2000, 1, 1, tzinfo=UTC)
FORMAT = (
    "five fields: minute hour day-of-month month day-of-week (numbers, names, *, lists, "
    "ranges and steps)"
)


@dataclass(frozen=True)
class CronSpec:
    """A parsed cron expression: its text (fields one space apart), the minutes and hours it
    matches, and whether it runs on elapsed time (its minute or hour field starts with ``*``)."""

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    elapsed: bool

    @property
    def shortest_gap_s(self) -> int:
        """The shortest local time between two fires: between two matching times of a day,
        and from a day's last to the next day's first (the day fields are left out: they only
        lengthen gaps). A spring-forward transition can shorten one gap by the hour it
        skips."""
        times = sorted(h * 60 + m for h in self.hours for m in self.minutes)
        gaps = [b - a for a, b in itertools.pairwise(times)]
        gaps.append(times[0] + MINUTES_PER_DAY - times[-1])
        return min(gaps) * 60


def parse_cron(text: object, min_interval_s: int = 60) -> CronSpec:
    """Pure: ``text`` as a :class:`CronSpec`, or E-SCHEDULE-001 saying what is wrong: not five
    fields, a field cronsim refuses, a cron that never fires, or one whose fires can come
    closer than ``min_interval_s`` apart."""
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_TEXT:
        raise ScheduleCronError(f"cron {str(text)[:80]!r}: expected {FORMAT}")
    fields = text.split()
    if len(fields) != FIELDS:
        raise ScheduleCronError(
            f"cron {text[:80]!r}: {len(fields)} fields, expected {FORMAT}", cron=text[:80]
        )
    normal = " ".join(fields)
    try:
        sim = CronSim(normal, PROBE_FROM)
        next(sim)
    except CronSimError as exc:
        raise ScheduleCronError(f"cron {normal!r}: {exc}; expected {FORMAT}", cron=normal) from None
    except StopIteration:
        raise ScheduleCronError(f"cron {normal!r} never fires", cron=normal) from None
    spec = CronSpec(
        text=normal,
        minutes=frozenset(sim.minutes),
        hours=frozenset(sim.hours),
        elapsed=fields[0].startswith("*") or fields[1].startswith("*"),
    )
    if spec.shortest_gap_s < min_interval_s:
        raise ScheduleCronError(
            f"cron {normal!r} fires {spec.shortest_gap_s} s apart; schedules fire at least "
            f"{min_interval_s} s apart (AWOOOP_SCHEDULE_MIN_INTERVAL_S)",
            cron=normal,
        )
    return spec


@functools.cache
def _zone_names() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


def parse_timezone(name: object) -> zoneinfo.ZoneInfo:
    """Pure: the IANA time zone ``name`` names, or E-SCHEDULE-002. Only names of the time zone
    database are taken (no paths, no POSIX TZ strings)."""
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_ZONE or name not in _zone_names():
        raise ScheduleTimezoneError(
            f"timezone {str(name)[:80]!r} is not an IANA time zone name (Europe/Madrid, "
            "America/New_York, UTC)",
            timezone=str(name)[:80],
        )
    return zoneinfo.ZoneInfo(name)


def _spec(spec: CronSpec | str) -> CronSpec:
    return spec if isinstance(spec, CronSpec) else parse_cron(spec)


def _zone(tz: zoneinfo.ZoneInfo | str) -> zoneinfo.ZoneInfo:
    return tz if isinstance(tz, zoneinfo.ZoneInfo) else parse_timezone(tz)


def next_fire(spec: CronSpec | str, tz: zoneinfo.ZoneInfo | str, after: datetime) -> datetime:
    """Pure: the schedule's first fire time strictly after ``after`` (an aware datetime), in
    UTC. A fire time cronsim gives at or before ``after`` (a wall-clock time whose first
    occurrence was before ``after``, which fell in the repeated hour) is passed over."""
    if after.tzinfo is None:
        raise ValueError("after must be an aware datetime")
    cron, zone = _spec(spec), _zone(tz)
    found = CronSim(cron.text, after.astimezone(zone))
    while True:
        try:
            candidate = next(found)
        except StopIteration:
            raise ScheduleCronError(f"cron {cron.text!r} never fires again") from None
        if candidate > after:
            return candidate.astimezone(UTC)


def fire_times(
    spec: CronSpec | str, tz: zoneinfo.ZoneInfo | str, first: datetime
) -> Iterator[datetime]:
    """Pure: ``first`` (a fire time) and every fire time after it, in order, without end."""
    cron, zone = _spec(spec), _zone(tz)
    moment = first
    while True:
        yield moment.astimezone(UTC)
        moment = next_fire(cron, zone, moment)


def upcoming(
    spec: CronSpec | str, tz: zoneinfo.ZoneInfo | str, after: datetime, count: int
) -> list[datetime]:
    """Pure: the first ``count`` fire times after ``after``."""
    times = fire_times(spec, tz, next_fire(spec, tz, after))
    return [next(times) for _ in range(count)]


def local_text(moment: datetime, tz: zoneinfo.ZoneInfo | str) -> str:
    """Pure: ``moment`` as local ISO-8601 with its offset, to the second."""
    return moment.astimezone(_zone(tz)).isoformat(timespec="seconds")
