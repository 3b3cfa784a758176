"""A project's schedules in Postgres (``awooop_schedules``, migration 0142): create, read,
list, update, pause, resume, delete.

Each function runs on the caller's connection: a tenant transaction of the project (row-level
security: a project sees and changes only its own schedules) or, for listings across
projects, the platform role. The definition is checked before anything is written
(:func:`awooop.schedules.rules.define`); a project holds at most
``AWOOOP_SCHEDULES_PER_PROJECT`` schedules (E-SCHEDULE-005), counted under a per-project
advisory lock so that creates at once cannot pass the bound together.

A schedule's first fire time is the first after its creation; a resumed schedule's the first
after the resume: nothing fires for the time a schedule was paused. An update that changes
when it fires (cron, time zone, jitter) moves it to the first fire time after the update. The
moments come from the caller (``now``), so that the loop's clock and a test's simulated one
are the same clock.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import msgspec

from awooop.core.db import Connection
from awooop.core.errors import InvalidInputError, ScheduleLimitError, ScheduleNotFoundError
from awooop.core.logs import get_logger
from awooop.eventlog import queries
from awooop.runs.pause_rules import MAX_ACTOR, check_text
from awooop.schedules import cron, rules
from awooop.schedules.rules import Definition

log = get_logger(__name__)

LIST_LIMIT = 10_000

LOCK_PROJECT = queries.load("schedule_lock_project")
INSERT = queries.load("schedule_insert")
GET = queries.load("schedule_get")
LIST = queries.load("schedule_list")
PAUSE = queries.load("schedule_pause")
RESUME = queries.load("schedule_resume")
DELETE = queries.load("schedule_delete")
UPDATE = queries.load("schedule_update")
# What an update may change, by the names the routes and the command line use.
CHANGEABLE = (
    "cron",
    "timezone",
    "contract",
    "input",
    "catch_up",
    "catch_up_window",
    "overlap",
    "jitter",
)


class Schedule(msgspec.Struct, frozen=True, kw_only=True):
    """One row of ``awooop_schedules``."""

    schedule_id: uuid.UUID
    project_id: str
    cron: str
    timezone: str
    contract_id: str
    input: Any
    catch_up: str
    catch_up_window_s: int
    overlap: str
    jitter_s: int
    next_fire_at: datetime
    due_at: datetime
    paused_at: datetime | None
    paused_by: str | None
    last_fire_at: datetime | None
    last_run_id: uuid.UUID | None
    last_outcome: str | None
    fires: int
    skipped: int
    created_by: str
    created_at: datetime
    updated_at: datetime

    @property
    def paused(self) -> bool:
        return self.paused_at is not None

    def upcoming(self, count: int) -> list[datetime]:
        """The schedule's next ``count`` fire times, from its next fire time on."""
        times = cron.fire_times(self.cron, self.timezone, self.next_fire_at)
        return [next(times) for _ in range(count)]


FIELDS = tuple(f.name for f in msgspec.structs.fields(Schedule))


def schedule_of(row: Any) -> Schedule:
    return Schedule(**{name: row[name] for name in FIELDS})


def columns(d: Definition) -> tuple[object, ...]:
    """Pure: a definition as the insert and the update write it (their parameters after the
    ids, in the order of the table's definition columns)."""
    return (
        d.cron,
        d.timezone,
        d.contract_id,
        d.input,
        d.catch_up.value,
        d.catch_up_window_s,
        d.overlap.value,
        d.jitter_s,
    )


def first_fire(
    schedule_id: uuid.UUID, spec: str, timezone: str, jitter_s: int, after: datetime
) -> tuple[datetime, datetime]:
    """Pure: the first fire time after ``after`` and its due moment (the time plus its
    jitter)."""
    moment = cron.next_fire(spec, timezone, after)
    return moment, moment + rules.jitter_delay(schedule_id, moment, jitter_s)


def amended(current: Schedule, changes: Mapping[str, object], min_interval_s: int) -> Definition:
    """Pure: ``current``'s definition with ``changes`` (names of :data:`CHANGEABLE`) applied,
    every part checked again as at creation (E-SCHEDULE-001..003, E-INPUT-001); no change at
    all is E-INPUT-001."""
    unknown = sorted(set(changes) - set(CHANGEABLE))
    if unknown:
        raise InvalidInputError(
            f"a schedule has no setting {unknown[0]!r}: {', '.join(CHANGEABLE)}"
        )
    if not changes:
        raise InvalidInputError(f"nothing to change: give at least one of {', '.join(CHANGEABLE)}")
    given: dict[str, Any] = {
        "cron": current.cron,
        "timezone": current.timezone,
        "contract": current.contract_id,
        "input": current.input,
        "catch_up": current.catch_up,
        "catch_up_window": current.catch_up_window_s,
        "overlap": current.overlap,
        "jitter": current.jitter_s,
        **changes,
    }
    return rules.define(
        cron_text=given["cron"],
        timezone=given["timezone"],
        contract_id=given["contract"],
        input=given["input"],
        catch_up=given["catch_up"],
        catch_up_window=given["catch_up_window"],
        overlap=given["overlap"],
        jitter=given["jitter"],
        min_interval_s=min_interval_s,
    )


def moves(current: Schedule, definition: Definition) -> bool:
    """Pure: whether ``definition`` fires at other times than ``current`` (its next fire time
    is then computed again)."""
    return (definition.cron, definition.timezone, definition.jitter_s) != (
        current.cron,
        current.timezone,
        current.jitter_s,
    )


# --- I/O -------------------------------------------------------------------------------------


async def create(
    conn: Connection,
    project_id: str,
    definition: Definition,
    *,
    actor: str,
    now: datetime,
    limit: int,
    schedule_id: uuid.UUID | None = None,
) -> Schedule:
    """Add a checked schedule to ``project_id``; its first fire time is the first after
    ``now``. E-SCHEDULE-005 when the project has ``limit`` schedules (nothing written)."""
    check_text("actor", actor, MAX_ACTOR, empty=False)
    sid = schedule_id or uuid.uuid4()
    d = definition
    moment, due = first_fire(sid, d.cron, d.timezone, d.jitter_s, now)
    await conn.execute(LOCK_PROJECT, project_id)
    row = await conn.fetchrow(
        INSERT,
        sid,
        project_id,
        *columns(d),
        moment,
        due,
        actor,
        limit,
    )
    if row is None:
        raise ScheduleLimitError(
            f"project {project_id} has {limit} schedules, as many as it may "
            "(AWOOOP_SCHEDULES_PER_PROJECT): delete one first",
            project_id=project_id,
        )
    made = schedule_of(row)
    log.info(
        "schedule_created",
        project_id=project_id,
        schedule_id=str(sid),
        cron=d.cron,
        timezone=d.timezone,
        next_fire_at=moment.isoformat(),
        actor=actor,
    )
    return made


def _found(row: Any, project_id: str, schedule_id: uuid.UUID) -> Schedule:
    if row is None:
        raise ScheduleNotFoundError(
            f"project {project_id} has no schedule {schedule_id}", schedule_id=schedule_id
        )
    return schedule_of(row)


async def get(conn: Connection, project_id: str, schedule_id: uuid.UUID) -> Schedule:
    """One schedule (E-SCHEDULE-004 when the project has no such schedule)."""
    return _found(await conn.fetchrow(GET, project_id, schedule_id), project_id, schedule_id)


async def listing(
    conn: Connection, project_id: str | None = None, limit: int = LIST_LIMIT
) -> list[Schedule]:
    """The schedules of ``project_id`` (None: of every project the role sees)."""
    return [schedule_of(r) for r in await conn.fetch(LIST, project_id, limit)]


async def pause(
    conn: Connection, project_id: str, schedule_id: uuid.UUID, *, actor: str
) -> Schedule:
    """The schedule fires nothing until it is resumed (pausing a paused one changes nothing)."""
    check_text("actor", actor, MAX_ACTOR, empty=False)
    paused = _found(
        await conn.fetchrow(PAUSE, project_id, schedule_id, actor), project_id, schedule_id
    )
    log.info("schedule_paused", project_id=project_id, schedule_id=str(schedule_id), actor=actor)
    return paused


async def resume(
    conn: Connection, project_id: str, schedule_id: uuid.UUID, *, actor: str, now: datetime
) -> Schedule:
    """A paused schedule fires again from its first fire time after ``now`` (one not paused
    is returned as it is)."""
    current = await get(conn, project_id, schedule_id)
    if not current.paused:
        return current
    moment, due = first_fire(schedule_id, current.cron, current.timezone, current.jitter_s, now)
    resumed = _found(
        await conn.fetchrow(RESUME, project_id, schedule_id, moment, due), project_id, schedule_id
    )
    log.info(
        "schedule_resumed",
        project_id=project_id,
        schedule_id=str(schedule_id),
        next_fire_at=moment.isoformat(),
        actor=actor,
    )
    return resumed


async def update(
    conn: Connection,
    project_id: str,
    schedule_id: uuid.UUID,
    changes: Mapping[str, object],
    *,
    actor: str,
    now: datetime,
    min_interval_s: int,
) -> Schedule:
    """Change a schedule in place (its id, counters, last run and pause stay). When it fires
    at other times, its next fire time is the first after ``now``; a paused one stays paused.
    Bad input raises before anything is written; E-SCHEDULE-004 when there is no such
    schedule."""
    check_text("actor", actor, MAX_ACTOR, empty=False)
    current = await get(conn, project_id, schedule_id)
    d = amended(current, changes, min_interval_s)
    moment, due = current.next_fire_at, current.due_at
    if moves(current, d):
        moment, due = first_fire(schedule_id, d.cron, d.timezone, d.jitter_s, now)
    row = await conn.fetchrow(
        UPDATE,
        project_id,
        schedule_id,
        *columns(d),
        moment,
        due,
    )
    updated = _found(row, project_id, schedule_id)
    log.info(
        "schedule_updated",
        project_id=project_id,
        schedule_id=str(schedule_id),
        changed=sorted(changes),
        next_fire_at=moment.isoformat(),
        actor=actor,
    )
    return updated


async def delete(
    conn: Connection, project_id: str, schedule_id: uuid.UUID, *, actor: str
) -> Schedule:
    """Drop the schedule (its runs stay); E-SCHEDULE-004 when there is none."""
    gone = _found(await conn.fetchrow(DELETE, project_id, schedule_id), project_id, schedule_id)
    log.info("schedule_deleted", project_id=project_id, schedule_id=str(schedule_id), actor=actor)
    return gone


def view(schedule: Schedule, upcoming: int = 0) -> dict[str, Any]:
    """A schedule as the routes and ``--json`` show it: its row, its next fire time in its own
    time zone, and its next ``upcoming`` fire times."""
    body: dict[str, Any] = msgspec.to_builtins(schedule)
    body["next_fire_local"] = cron.local_text(schedule.next_fire_at, schedule.timezone)
    if upcoming:
        body["upcoming"] = [
            cron.local_text(t, schedule.timezone) for t in schedule.upcoming(upcoming)
        ]
    return body


def parse_schedule_id(text: str) -> uuid.UUID:
    """A schedule id from a path or the command line (E-SCHEDULE-004 when it is no UUID: no
    schedule has that id)."""
    try:
        return uuid.UUID(text)
    except ValueError:
        raise ScheduleNotFoundError(
            f"no schedule {text[:64]!r}: a schedule id is a UUID", schedule_id=text[:64]
        ) from None
