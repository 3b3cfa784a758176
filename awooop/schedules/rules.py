"""What a schedule is and what a fire does, as pure functions: its definition checked, its
catch-up after an outage, its jitter, and the key of each fire time's run.

**Catch-up.** The schedules loop fires a schedule once its next fire time is due (the fire
time plus its jitter, :func:`jitter_delay`). A due fire time the loop sees within the grace
(``AWOOOP_SCHEDULE_GRACE_S``, 15 s) of its due moment is **on time** and always fires. Later
ones were **missed** (the loops were down, or behind): the schedule's catch-up policy says
which of them still fire (:func:`missed`):

- ``latest``: only the most recent due fire time, when it is on time or within the catch-up
  window (``--catch-up-window``, default 1 h, at most 7 days);
- ``all``: every due fire time within the window (and any on time), the most recent
  ``AWOOOP_SCHEDULE_CATCH_UP_MAX`` of them (100) when there are more;
- ``skip``: none but those on time; the schedule goes on at its next future fire time.

Fire times older than the window (and the grace) are passed over unseen, whatever the policy.

**Jitter.** ``--jitter 30s`` delays each fire time by a delay in [0, 30 s) that depends only
on the schedule and the fire time (a digest of both): every loop replica computes the same,
so jitter spreads schedules that share a cron without any replica firing early or twice. It
is at most the cron's shortest gap, so a fire's delay never passes the next fire time.

**Keys.** The run of a fire time has the idempotency key ``schedule:{schedule_id}:{fire
time}`` (UTC, ISO-8601 to the second, ``Z``) on the ``api`` channel: intake's dedupe makes a
second start of the same fire time a duplicate, and ``awooop runs show`` reads the schedule
and the fire time back from it (:func:`parse_fire_key`).
"""

from __future__ import annotations

import enum
import hashlib
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from awooop.core.errors import InvalidInputError, SchedulePolicyError
from awooop.ingest.common import check_storable
from awooop.ingest.credentials import check_contract_id
from awooop.schedules import cron
from awooop.schedules.cron import CronSpec

KEY_PREFIX = "schedule:"
KEY_TIME = "%Y-%m-%dT%H:%M:%SZ"
CHANNEL = "api"  # the channel a schedule's runs come in on
MIN_WINDOW_S = 60
MAX_WINDOW_S = 7 * 86400  # awooop_schedules.catch_up_window_s's CHECK
DEFAULT_WINDOW_S = 3600
MAX_JITTER_S = 86400  # awooop_schedules.jitter_s's CHECK
DEFAULT_GRACE_S = 15.0
DEFAULT_CAP = 100
MAX_INPUT_BYTES = 64 * 1024
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
DURATION = re.compile(r"(?:\d+[smhd])+")
DURATION_PART = re.compile(r"(\d+)([smhd])")

_encode = msgspec.json.Encoder().encode


class CatchUp(enum.StrEnum):
    LATEST = "latest"
    ALL = "all"
    SKIP = "skip"


class Overlap(enum.StrEnum):
    SKIP = "skip"
    ALLOW = "allow"
    CANCEL_PREVIOUS = "cancel_previous"


# --- the definition ---------------------------------------------------------------------------


class Definition(msgspec.Struct, frozen=True, kw_only=True):
    """A schedule as given, every part checked (:func:`define`)."""

    cron: str
    timezone: str
    contract_id: str
    input: Any
    catch_up: CatchUp = CatchUp.LATEST
    catch_up_window_s: int = DEFAULT_WINDOW_S
    overlap: Overlap = Overlap.SKIP
    jitter_s: int = 0


def parse_duration(value: object, what: str) -> int:
    """Pure: seconds of ``value``: an integer of seconds, or text such as ``90``, ``30s``,
    ``5m``, ``1h``, ``1h30m``, ``2d`` (E-SCHEDULE-003 naming ``what`` otherwise)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        if text.isdigit():
            return int(text)
        if DURATION.fullmatch(text):
            return sum(int(n) * UNITS[u] for n, u in DURATION_PART.findall(text))
    raise SchedulePolicyError(
        f"{what} {str(value)[:40]!r}: expected seconds or a duration such as 30s, 5m, 1h, 1d",
        field=what,
    )


def _choice(kind: type[CatchUp] | type[Overlap], value: object, what: str) -> Any:
    choices = {k.value: k for k in kind}
    if isinstance(value, str) and value in choices:
        return choices[value]
    raise SchedulePolicyError(
        f"{what} {str(value)[:40]!r}: expected one of {', '.join(choices)}", field=what
    )


def check_input(value: Any) -> Any:
    """Pure: the runs' input: JSON that Postgres stores, at most 64 KiB (E-INPUT-001)."""
    try:
        size = len(_encode(value))
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidInputError(f"the schedule's input is not JSON: {exc}") from None
    if size > MAX_INPUT_BYTES:
        raise InvalidInputError(f"the schedule's input is {size} bytes, at most {MAX_INPUT_BYTES}")
    check_storable(value, None, "the schedule's input")
    return value


def define(
    *,
    cron_text: object,
    timezone: object,
    contract_id: str,
    input: Any,
    catch_up: object = CatchUp.LATEST.value,
    catch_up_window: object = DEFAULT_WINDOW_S,
    overlap: object = Overlap.SKIP.value,
    jitter: object = 0,
    min_interval_s: int = 60,
) -> Definition:
    """Pure: every part of a schedule checked, the first problem raised: the cron
    (E-SCHEDULE-001), the time zone (E-SCHEDULE-002), the policies and durations
    (E-SCHEDULE-003), the contract and the input (E-INPUT-001)."""
    spec = cron.parse_cron(cron_text, min_interval_s)
    zone = cron.parse_timezone(timezone)
    catch = _choice(CatchUp, catch_up, "catch-up")
    window = parse_duration(catch_up_window, "catch-up window")
    if not MIN_WINDOW_S <= window <= MAX_WINDOW_S:
        raise SchedulePolicyError(
            f"catch-up window {window} s: from {MIN_WINDOW_S} s to {MAX_WINDOW_S // 86400} days",
            field="catch-up window",
        )
    over = _choice(Overlap, overlap, "overlap")
    delay = parse_duration(jitter, "jitter")
    if delay > min(spec.shortest_gap_s, MAX_JITTER_S):
        raise SchedulePolicyError(
            f"jitter {delay} s: at most the cron's shortest gap ({spec.shortest_gap_s} s), so a "
            "fire's delay never passes the next fire time",
            field="jitter",
        )
    return Definition(
        cron=spec.text,
        timezone=zone.key,
        contract_id=check_contract_id(contract_id),
        input=check_input(input),
        catch_up=catch,
        catch_up_window_s=window,
        overlap=over,
        jitter_s=delay,
    )


# --- jitter and keys ----------------------------------------------------------------------------


def key_time(fire_time: datetime) -> str:
    """Pure: a fire time as its key writes it (UTC, to the second, ``Z``)."""
    return fire_time.astimezone(UTC).strftime(KEY_TIME)


def jitter_delay(schedule_id: uuid.UUID, fire_time: datetime, jitter_s: int) -> timedelta:
    """Pure: the delay of ``fire_time`` in [0, ``jitter_s``), to the millisecond: a digest of
    the schedule and the fire time, the same on every replica and every run of the code."""
    if jitter_s <= 0:
        return timedelta(0)
    digest = hashlib.sha256(f"{schedule_id}/{key_time(fire_time)}".encode()).digest()
    millis = int.from_bytes(digest[:8], "big") % (jitter_s * 1000)
    return timedelta(milliseconds=millis)


def fire_key(schedule_id: uuid.UUID, fire_time: datetime) -> str:
    """Pure: the idempotency key of the run of ``fire_time``."""
    return f"{KEY_PREFIX}{schedule_id}:{key_time(fire_time)}"


def parse_fire_key(key: str | None) -> tuple[uuid.UUID, datetime] | None:
    """Pure: the schedule and fire time a run's key names (None: not a schedule's key)."""
    if not key or not key.startswith(KEY_PREFIX):
        return None
    schedule, _, moment = key.removeprefix(KEY_PREFIX).partition(":")
    try:
        return uuid.UUID(schedule), datetime.strptime(moment, KEY_TIME).replace(tzinfo=UTC)
    except ValueError:
        return None


def scheduled_by(key: str | None) -> dict[str, str] | None:
    """Pure: what ``runs show`` says of a run a schedule started: its schedule and fire time
    (None for any other run)."""
    found = parse_fire_key(key)
    if found is None:
        return None
    return {"schedule_id": str(found[0]), "fire_time": key_time(found[1])}


# --- catch-up -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Due:
    """What one look at a schedule decides: the fire times to start now, in order; how many
    due fire times it passes over (missed, outside the policy); the next fire time not due."""

    fire: tuple[datetime, ...]
    passed: int
    next_fire_at: datetime


def missed(
    spec: CronSpec | str,
    tz: Any,
    since: datetime,
    now: datetime,
    policy: CatchUp | str,
    window: float | timedelta,
    *,
    grace_s: float = DEFAULT_GRACE_S,
    cap: int = DEFAULT_CAP,
    schedule_id: uuid.UUID | None = None,
    jitter_s: int = 0,
) -> Due:
    """Pure: the fire times of a schedule due at ``now``, from ``since`` (its next fire time
    not fired yet) on, and which of them ``policy`` starts (see the module docstring).

    A fire time is due once ``now`` reaches it plus its jitter (:func:`jitter_delay` of
    ``schedule_id``, below ``jitter_s``); it is on time while ``now`` is within ``grace_s``
    of that. ``window`` is
    the catch-up window (seconds or a timedelta), ``cap`` the most fire times ``all`` starts.
    """
    cron_spec = spec if isinstance(spec, CronSpec) else cron.parse_cron(spec)
    policy = CatchUp(policy)
    span = window if isinstance(window, timedelta) else timedelta(seconds=window)
    grace = timedelta(seconds=grace_s)

    def delay_of(t: datetime) -> timedelta:
        return timedelta(0) if schedule_id is None else jitter_delay(schedule_id, t, jitter_s)

    horizon = now - span
    # Older than this, a fire time is neither within the window nor on time: passed unseen.
    lower = min(horizon, now - grace - timedelta(seconds=jitter_s))
    moment = since if since >= lower else cron.next_fire(cron_spec, tz, lower - _TICK)
    due: list[datetime] = []
    while moment <= now and moment + delay_of(moment) <= now:
        due.append(moment)
        moment = cron.next_fire(cron_spec, tz, moment)

    def on_time(t: datetime) -> bool:
        return now - (t + delay_of(t)) <= grace

    wanted = [t for t in due if t >= horizon or on_time(t)]
    if policy is CatchUp.LATEST:
        fire = wanted[-1:]
    elif policy is CatchUp.ALL:
        fire = wanted[-cap:] if cap > 0 else []
    else:
        fire = [t for t in due if on_time(t)]
    return Due(fire=tuple(fire), passed=len(due) - len(fire), next_fire_at=moment)


_TICK = timedelta(microseconds=1)
