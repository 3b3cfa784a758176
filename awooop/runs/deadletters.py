"""Listing and re-driving dead letters (``awooop deadletters``, the console): all in Postgres.

Dead letters are rows of ``awooop_dead_letters`` (:mod:`awooop.eventlog.deadletters`). Re-driving
one decides from its run's state, in one tenant transaction that locks the dead letter and the
run:

- FAILED (E-RUN-004 or E-RUN-005: its work was dead-lettered): the dead letter is resolved
  ``redriven`` and the run reset through the retry path (:func:`awooop.runs.control.retry`: a
  ``RunRetried`` event, a new budget of attempts, the actor in the event's metadata). The relay
  publishes ``RunRetried`` to the work stream like every dispatch event: that is the doorbell;
- PENDING or RESUMED: nothing to change in the run; the dead letter is resolved ``redriven``
  and, after the commit, the run's last dispatch event is appended to its shard's work stream
  again (only while the shard's epoch is there: else the relay is rebuilding the shard and
  republishes unfinished runs itself; the workers' polling finds PENDING runs either way);
- RUNNING, WAITING_* (a worker or an approver has it) or COMPLETED/CANCELLED: there is nothing
  to put back to work; the dead letter is resolved ``discarded``.

Two re-drives of one dead letter take turns on its row lock; the second finds it resolved and
changes nothing. A dead letter without a run (an undecodable message) and a dead letter whose
run is gone are left open and reported; :func:`discard` resolves one without touching a run.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from functools import partial
from typing import Protocol

import msgspec

from awooop.core.db import Connection, Database
from awooop.core.errors import InvalidInputError, RunNotFoundError
from awooop.core.events import DISPATCH_EVENT_TYPES, run_stream_id
from awooop.eventlog import deadletters, eventlog
from awooop.eventlog.deadletters import DeadLetterRow
from awooop.eventlog.eventlog import RecordedEvent
from awooop.eventlog.state import RunStatus
from awooop.runs import control, run_rows
from awooop.streams.clients import StreamClients
from awooop.streams.publish import WORK_ONLY, by_shard, publish_shard

PAGE = 1000


class Outcome(enum.StrEnum):
    RETRIED = "retried"  # a FAILED run was reset (RunRetried)
    REQUEUED = "requeued"  # the run was dispatchable: its work message was published again
    DISCARDED = "discarded"  # nothing to put back to work (in progress or finished)
    LEFT = "left"  # not re-driven; the dead letter stays open (detail says why)


class Result(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    run_id: uuid.UUID | None
    project_id: str | None
    outcome: Outcome
    detail: str = ""


# --- pure ------------------------------------------------------------------------------------


def plan_for(status: RunStatus) -> Outcome:
    """What re-driving a work message does for a run in ``status``."""
    if status is RunStatus.FAILED:
        return Outcome.RETRIED
    if status in (RunStatus.PENDING, RunStatus.RESUMED):
        return Outcome.REQUEUED
    return Outcome.DISCARDED


def parse_id(text: str) -> uuid.UUID:
    """A dead letter's id as ``deadletters list`` prints it."""
    try:
        return uuid.UUID(text.strip())
    except ValueError:
        raise InvalidInputError(
            f"dead letter id {text[:60]!r}: expected the id `awooop deadletters list` prints"
        ) from None


def check_shard(shard: int, shard_count: int) -> int:
    if not 0 <= shard < shard_count:
        raise InvalidInputError(f"--shard must be between 0 and {shard_count - 1}")
    return shard


def last_dispatch(events: list[RecordedEvent]) -> RecordedEvent | None:
    """The run's newest dispatch event (what its work message carries)."""
    return next((e for e in reversed(events) if e.event_type in DISPATCH_EVENT_TYPES), None)


# --- I/O -------------------------------------------------------------------------------------

Fault = Callable[[str], Awaitable[None]]


class RedriveClients(StreamClients, Protocol):
    @property
    def db(self) -> Database: ...


async def list_entries(
    services: RedriveClients,
    shard: int | None = None,
    limit: int | None = None,
    project_id: str | None = None,
) -> list[DeadLetterRow]:
    """Open dead letters of every project (of ``project_id``, of the projects of ``shard``),
    newest first, as the platform role; all of them without ``limit``."""
    found: list[DeadLetterRow] = []
    after: tuple[datetime, uuid.UUID] | None = None
    while limit is None or len(found) < limit:
        rows = await services.db.in_platform(
            partial(deadletters.list_open, project_id=project_id, limit=PAGE, after=after)
        )
        found.extend(
            r for r in rows if shard is None or services.keys.shard_of(r.project_id) == shard
        )
        if len(rows) < PAGE:
            break
        after = (rows[-1].dead_lettered_at, rows[-1].dead_letter_id)
    return found if limit is None else found[:limit]


async def find(services: RedriveClients, ids: list[str]) -> list[DeadLetterRow | str]:
    """Each id's dead letter, or the id itself when there is none."""
    wanted = [parse_id(text) for text in ids]

    async def read(conn: Connection) -> list[DeadLetterRow | None]:
        return [await deadletters.get(conn, dead_id) for dead_id in wanted]

    rows = await services.db.in_platform(read)
    return [text if row is None else row for text, row in zip(ids, rows, strict=True)]


async def entries_of_run(
    conn: Connection, project_id: str, run_id: uuid.UUID
) -> list[DeadLetterRow]:
    """The open dead letters of ``run_id`` (at most one), in the caller's tenant scope."""
    return [d for d in await deadletters.open_of_runs(conn, [run_id]) if d.project_id == project_id]


async def redrive(
    services: RedriveClients,
    entry: DeadLetterRow,
    *,
    actor: str,
    attempts: int = 3,
    fault: Fault | None = None,
) -> Result:
    """Re-drive one dead letter (see the module docstring). ``fault`` is a test hook called at
    ``after_postgres``."""
    run_id = entry.run_id
    ident = str(entry.dead_letter_id)

    def result(outcome: Outcome, detail: str = "") -> Result:
        return Result(
            id=ident, run_id=run_id, project_id=entry.project_id, outcome=outcome, detail=detail
        )

    if run_id is None:
        return result(Outcome.LEFT, "undecodable message: nothing to re-drive")
    doorbell: list[RecordedEvent] = []

    async def decide(conn: Connection) -> Result:
        assert run_id is not None
        current = await deadletters.get_for_update(conn, entry.dead_letter_id)
        if current is None or current.resolution is not None:
            resolution = "gone" if current is None else current.resolution
            return result(Outcome.LEFT, f"already resolved ({resolution})")
        state, _ = await run_rows.lock(conn, run_id)
        planned = plan_for(RunStatus(state.status))
        resolution = deadletters.DISCARDED if planned is Outcome.DISCARDED else deadletters.REDRIVEN
        await deadletters.resolve(conn, entry.dead_letter_id, resolution, actor)
        if planned is Outcome.RETRIED:
            meta = {"actor": actor, "redrive": ident}
            await control.retry(conn, run_id, actor=actor, extra_attempts=attempts, metadata=meta)
        elif planned is Outcome.REQUEUED:
            found = last_dispatch(await eventlog.read_stream(conn, run_stream_id(run_id)))
            doorbell.extend([] if found is None else [found])
        detail = "the run is in progress or finished" if planned is Outcome.DISCARDED else ""
        return result(planned, detail)

    try:
        done = await services.db.in_tenant(entry.project_id, decide)
    except RunNotFoundError:
        return result(Outcome.LEFT, f"run {run_id} not found in project {entry.project_id}")
    if fault is not None:
        await fault("after_postgres")
    if doorbell and not await ring(services, doorbell[-1]):
        return msgspec.structs.replace(
            done, detail="the shard's Redis data was lost: the relay republishes its runs"
        )
    return done


async def discard(services: RedriveClients, entry: DeadLetterRow, *, actor: str) -> Result:
    """Resolve ``entry`` as ``discarded``, leaving its run as it is (as the platform role: a
    dead letter without a run belongs to no tenant)."""
    done = await services.db.in_platform_writes(
        lambda conn: deadletters.resolve(conn, entry.dead_letter_id, deadletters.DISCARDED, actor)
    )
    return Result(
        id=str(entry.dead_letter_id),
        run_id=entry.run_id,
        project_id=entry.project_id,
        outcome=Outcome.DISCARDED if done else Outcome.LEFT,
        detail="" if done else "already resolved",
    )


async def ring(services: StreamClients, event: RecordedEvent) -> bool:
    """Append ``event`` to its shard's work stream while the shard's epoch holds; False when
    the shard has no epoch (nothing written)."""
    keys, redis = services.keys, services.redis
    [(shard, items)] = by_shard([event], keys, route=WORK_ONLY).items()
    epoch = await redis.get(keys.epoch(shard))
    if epoch is None:
        return False
    value = epoch.decode() if isinstance(epoch, bytes) else str(epoch)
    return await publish_shard(redis, keys, shard, keys.epoch(shard), value, items) >= 0
