"""Re-driving dead letters (``awooop deadletters redrive``): Postgres decides, then Redis.

For an entry that came from a shard's work stream the run's state decides, in one tenant
transaction that locks the run:

- FAILED (typically E-RUN-005, failed when its message was dead-lettered): reset through the
  retry path (:func:`awooop.runs.control.retry`: a ``RunRetried`` event, a new budget of
  attempts, the actor in the event's metadata); the message is then republished;
- PENDING or RESUMED: nothing to change; the message is republished;
- RUNNING, WAITING_* (a worker or an approver has it) or COMPLETED/CANCELLED: there is nothing
  to put back to work; the entry is removed (discarded).

An entry from the events stream (a projector group gave up on it) is republished to the
events stream; projectors ignore versions they already have. Only after Postgres committed is
the message appended to its stream again and the dead-letter entry deleted, both in one Redis
script (:data:`streams.scripts.REDRIVE`). A re-drive that crashes after the commit leaves the
entry in place: running it again finds the run PENDING and republishes (workers tolerate the
duplicate that the relay's own ``RunRetried`` message makes anyway). Undecodable entries,
unknown runs and shards whose Redis data was lost are left alone and reported.
"""

from __future__ import annotations

import enum
import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Protocol

import msgspec

from awooop.core.db import Connection, Database
from awooop.core.errors import InvalidInputError, RunNotFoundError
from awooop.core.events import run_id_of_stream
from awooop.log.state import RunStatus
from awooop.runs import control, store
from streams.clients import StreamClients
from streams.deadletter import (
    DeadLetter,
    dead_letter_of,
    read_dead_letter,
    read_dead_letters,
    redrive_entry,
)
from streams.envelope import encode

ENTRY_ID = re.compile(r"(?:(\d{1,6}):)?(\d{1,20}-\d{1,20})")
PAGE = 1000


class Outcome(enum.StrEnum):
    RETRIED = "retried"  # a FAILED run was reset (RunRetried) and its message republished
    REQUEUED = "requeued"  # the run was dispatchable: its message was republished
    REPUBLISHED = "republished"  # an events-stream message went back to the events stream
    DISCARDED = "discarded"  # nothing to put back to work (in progress or finished): removed
    LEFT = "left"  # not re-driven; the entry stays (detail says why)


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


def parse_id(text: str, shard_count: int) -> tuple[int | None, str]:
    """``SHARD:ENTRY_ID`` (as ``deadletters list`` prints it) or a bare ``ENTRY_ID``."""
    match = ENTRY_ID.fullmatch(text.strip())
    if match is None:
        raise InvalidInputError(f"dead letter id {text!r}: expected SHARD:ENTRY_ID, e.g. 2:1700-0")
    shard = None if match.group(1) is None else int(match.group(1))
    if shard is not None and shard >= shard_count:
        raise InvalidInputError(f"dead letter id {text!r}: shard outside 0..{shard_count - 1}")
    return shard, match.group(2)


def check_shard(shard: int, shard_count: int) -> int:
    if not 0 <= shard < shard_count:
        raise InvalidInputError(f"--shard must be between 0 and {shard_count - 1}")
    return shard


# --- I/O -------------------------------------------------------------------------------------

Fault = Callable[[str], Awaitable[None]]


class RedriveClients(StreamClients, Protocol):
    @property
    def db(self) -> Database: ...


async def list_entries(
    services: StreamClients, shard: int | None = None, limit: int | None = None
) -> list[DeadLetter]:
    """Dead letters of one shard or all, oldest first per shard (all of them without limit)."""
    shards = services.keys.shards() if shard is None else [shard]
    found: list[DeadLetter] = []
    for s in shards:
        start = "-"
        while limit is None or len(found) < limit:
            page = await read_dead_letters(
                services.redis, services.keys, s, count=PAGE, start=start
            )
            found.extend(page)
            if len(page) < PAGE:
                break
            start = "(" + page[-1].entry_id
    return found if limit is None else found[:limit]


async def find(services: StreamClients, ids: list[str]) -> list[DeadLetter | str]:
    """Each id's entry, or the id itself when no shard holds it."""
    out: list[DeadLetter | str] = []
    for text in ids:
        shard, entry_id = parse_id(text, services.keys.shard_count)
        shards = services.keys.shards() if shard is None else [shard]
        entry = None
        for s in shards:
            entry = await read_dead_letter(services.redis, services.keys, s, entry_id)
            if entry is not None:
                break
        out.append(text if entry is None else entry)
    return out


async def redrive(
    services: RedriveClients,
    entry: DeadLetter,
    *,
    actor: str,
    attempts: int = 3,
    fault: Fault | None = None,
) -> Result:
    """Re-drive one entry (see the module docstring). ``fault`` is a test hook called at
    ``after_postgres``."""
    keys, redis = services.keys, services.redis
    env = entry.envelope()
    if env is None:
        return Result(
            id=entry.id,
            run_id=None,
            project_id=None,
            outcome=Outcome.LEFT,
            detail="undecodable message: nothing to re-drive",
        )
    run_id = run_id_of_stream(env.stream_id)

    def left(detail: str) -> Result:
        return Result(
            id=entry.id,
            run_id=run_id,
            project_id=env.project_id,
            outcome=Outcome.LEFT,
            detail=detail,
        )

    work, events = keys.work_stream(entry.shard), keys.events_stream(entry.shard)
    if entry.stream == events:
        outcome = Outcome.REPUBLISHED
    elif entry.stream != work:
        return left(f"unknown source stream {entry.stream!r}")
    elif run_id is None:
        outcome = Outcome.REQUEUED
    else:
        meta = {"actor": actor, "redrive": entry.id}

        async def decide(conn: Connection) -> Outcome:
            assert run_id is not None
            state, _ = await store.lock(conn, run_id)
            planned = plan_for(RunStatus(state.status))
            if planned is Outcome.RETRIED:
                await control.retry(
                    conn, run_id, actor=actor, extra_attempts=attempts, metadata=meta
                )
            return planned

        try:
            outcome = await services.db.in_tenant(env.project_id, decide)
        except RunNotFoundError:
            return left(f"run {run_id} not found in project {env.project_id}")
    if fault is not None:
        await fault("after_postgres")
    done = Result(id=entry.id, run_id=run_id, project_id=env.project_id, outcome=outcome)
    if outcome is Outcome.DISCARDED:
        await redis.xdel(keys.dead_letter_stream(entry.shard), entry.entry_id)
        return msgspec.structs.replace(done, detail="the run is in progress or finished")
    again = encode(msgspec.structs.replace(env, attempt=env.attempt + 1))
    written = await redrive_entry(redis, keys, entry, entry.stream, again)
    if written < 0:
        return left("the shard's Redis data was lost (no epoch): the relay republishes its runs")
    if written == 0:
        return msgspec.structs.replace(done, detail="already re-driven by someone else")
    return done


async def entries_of_run(
    services: StreamClients, project_id: str, run_id: uuid.UUID, scan: int = PAGE
) -> list[DeadLetter]:
    """The work-stream dead letters of ``run_id`` among the newest ``scan`` of its shard."""
    shard = services.keys.shard_of(project_id)
    rows = await services.redis.xrevrange(
        services.keys.dead_letter_stream(shard), max="+", min="-", count=scan
    )
    stream_id = f"run-{run_id}"
    found = []
    for entry_id, fields in rows:
        entry = dead_letter_of(shard, entry_id, fields)
        env = entry.envelope()
        if env is not None and env.stream_id == stream_id and env.project_id == project_id:
            found.append(entry)
    return found
