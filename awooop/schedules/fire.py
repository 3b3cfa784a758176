"""One fire of one schedule: the runs of its due fire times, started through intake in the
transaction that moves the schedule on.

:func:`due` reads (platform role, every project) the schedules whose due moment has come, in
due order across projects, each project's first of a moment before any project's second
(``schedule_due.sql``). :func:`fire` then runs in a tenant
transaction of the schedule's project:

1. it locks the schedule if it is still due and not paused (``FOR UPDATE SKIP LOCKED``: a
   schedule another replica is firing is left to it);
2. :func:`awooop.schedules.rules.missed` decides which due fire times start (on time, or by
   the catch-up policy after an outage) and the next fire time;
3. each fire time's run is created by intake itself (:func:`awooop.ingest.ingest_write.ingest`,
   as a producer's event on the ``api`` channel) with the key ``schedule:{id}:{fire time}``:
   a second create of the same fire time is a duplicate and writes nothing. Before it, the
   overlap policy looks at the schedule's previous run: ``skip`` starts nothing while it is
   unfinished, ``cancel_previous`` cancels it through the operators' cancel
   (:func:`awooop.runs.control.cancel`, actor ``schedule:{id}``), ``allow`` does not look;
4. the schedule moves to its next fire time by compare-and-swap on the fire time it was
   fired from (``schedule_advance.sql``); if another transaction moved it first, everything
   this fire wrote is rolled back (:class:`LostRace`).

So however many loop replicas run, each fire time of a schedule starts at most one run: the
row lock, the compare-and-swap and intake's dedupe each stop a second one. A fire time whose
intake refuses it (a concurrency key's depth cap, E-CONCURRENCY-001) is not started and not
tried again; its refusal is the schedule's ``last_outcome``. The runs' ``RunCreated`` carries
``source: schedule``, ``schedule_id`` and ``fire_time`` in its metadata, and the trace of the
fire.
"""

from __future__ import annotations

import uuid
from datetime import datetime

import msgspec

from awooop.core.config import Settings
from awooop.core.db import Connection
from awooop.core.errors import AwoooPError, IllegalTransitionError
from awooop.core.logs import get_logger
from awooop.eventlog import queries
from awooop.eventlog.state import TERMINAL
from awooop.ingest import ingest_write
from awooop.ingest.common import ParsedEvent
from awooop.runs import control, run_rows
from awooop.schedules import rules
from awooop.schedules.rules import CHANNEL, Overlap
from awooop.schedules.store import Schedule, schedule_of

log = get_logger(__name__)

DUE_FIRST = queries.load("schedule_due_first")
DUE = queries.load("schedule_due")
LOCK_DUE = queries.load("schedule_lock_due")
ADVANCE = queries.load("schedule_advance")

STARTED = "started"
DUPLICATE = "duplicate"
SKIPPED_OVERLAP = "skipped_overlap"
MISSED = "missed"
REFUSED = "refused"


class LostRace(Exception):
    """The schedule moved on in another transaction while this one fired it."""


class Candidate(msgspec.Struct, frozen=True):
    """A schedule that was due when the loop looked."""

    schedule_id: uuid.UUID
    project_id: str
    next_fire_at: datetime
    due_at: datetime


class Start(msgspec.Struct, frozen=True):
    """What one fire time did: ``outcome`` (started, duplicate, skipped_overlap, or
    refused:<code>) and its run (None when none was started)."""

    fire_time: datetime
    outcome: str
    run_id: uuid.UUID | None = None


class Fired(msgspec.Struct, frozen=True):
    """One fire of a schedule: the fire times it looked at and the one it moved on to."""

    schedule_id: uuid.UUID
    project_id: str
    starts: list[Start]
    passed: int  # due fire times passed over by the catch-up policy
    next_fire_at: datetime


async def due(conn: Connection, now: datetime, batch: int) -> list[Candidate]:
    """The schedules due at ``now``, at most ``batch``, in due order across projects (each
    project's first of a moment before any project's second)."""
    first = await conn.fetchval(DUE_FIRST)
    if first is None or first > now:
        return []
    rows = await conn.fetch(DUE, now, batch)
    return [
        Candidate(r["schedule_id"], r["project_id"], r["next_fire_at"], r["due_at"]) for r in rows
    ]


async def fire(
    conn: Connection, settings: Settings, candidate: Candidate, now: datetime
) -> Fired | None:
    """Fire ``candidate`` at ``now`` in the caller's tenant transaction of its project; None
    when it is no longer due (fired by another replica, paused, deleted, or locked)."""
    row = await conn.fetchrow(LOCK_DUE, candidate.project_id, candidate.schedule_id, now)
    if row is None:
        return None
    schedule = schedule_of(row)
    plan = rules.missed(
        schedule.cron,
        schedule.timezone,
        schedule.next_fire_at,
        now,
        schedule.catch_up,
        schedule.catch_up_window_s,
        grace_s=settings.schedule_grace_s,
        cap=settings.schedule_catch_up_max,
        schedule_id=schedule.schedule_id,
        jitter_s=schedule.jitter_s,
    )
    previous = schedule.last_run_id
    starts: list[Start] = []
    for fire_time in plan.fire:
        start = await _start(conn, settings, schedule, fire_time, previous)
        starts.append(start)
        previous = start.run_id or previous
    nxt = plan.next_fire_at
    delay = rules.jitter_delay(schedule.schedule_id, nxt, schedule.jitter_s)
    begun = sum(1 for s in starts if s.outcome == STARTED)
    skipped = plan.passed + sum(1 for s in starts if s.outcome not in (STARTED, DUPLICATE))
    outcome = starts[-1].outcome if starts else (MISSED if plan.passed else None)
    moved = await conn.fetchrow(
        ADVANCE,
        schedule.schedule_id,
        schedule.next_fire_at,
        nxt,
        nxt + delay,
        plan.fire[-1] if plan.fire else None,
        previous,
        outcome,
        begun,
        skipped,
    )
    if moved is None:
        raise LostRace(str(schedule.schedule_id))
    return Fired(schedule.schedule_id, schedule.project_id, starts, plan.passed, nxt)


async def _start(
    conn: Connection,
    settings: Settings,
    schedule: Schedule,
    fire_time: datetime,
    previous: uuid.UUID | None,
) -> Start:
    """One fire time's run, after the overlap policy looked at the previous run."""
    overlap = Overlap(schedule.overlap)
    unfinished = False
    if previous is not None and overlap is not Overlap.ALLOW:
        prior = await run_rows.load(conn, previous)
        unfinished = prior is not None and prior.status not in TERMINAL
    if unfinished and overlap is Overlap.SKIP:
        return Start(fire_time, SKIPPED_OVERLAP)
    key = rules.fire_key(schedule.schedule_id, fire_time)
    actor = f"schedule:{schedule.schedule_id}"
    metadata = {
        **ingest_write.trace_metadata("schedule"),
        "schedule_id": str(schedule.schedule_id),
        "fire_time": rules.key_time(fire_time),
    }
    try:
        async with conn.transaction():  # a savepoint: a refusal undoes this fire time only
            if unfinished and previous is not None:
                await _cancel(conn, previous, actor, key)
            config = await ingest_write.load_producer_config(
                conn, settings, schedule.project_id, CHANNEL, schedule.contract_id
            )
            [outcome] = await ingest_write.ingest(
                conn,
                schedule.project_id,
                CHANNEL,
                [ParsedEvent(key, schedule.input)],
                config=config,
                contract_id=schedule.contract_id,
                metadata=metadata,
            )
    except AwoooPError as exc:
        log.warning(
            "schedule_fire_refused",
            schedule_id=str(schedule.schedule_id),
            fire_time=rules.key_time(fire_time),
            code=exc.code,
            reason=exc.message,
        )
        return Start(fire_time, f"{REFUSED}:{exc.code}")
    return Start(fire_time, STARTED if outcome.created else DUPLICATE, outcome.run_id)


async def _cancel(conn: Connection, run_id: uuid.UUID, actor: str, key: str) -> None:
    """Cancel the schedule's previous run (overlap ``cancel_previous``), as an operator's
    cancel does; one that finished meanwhile is left as it is."""
    try:
        async with conn.transaction():
            await control.cancel(
                conn,
                run_id,
                actor=actor,
                reason=f"overlap cancel_previous: {key} started",
                metadata={"actor": actor},
            )
    except IllegalTransitionError:
        return
