"""The one-statement writes of many runs: the worker's claims, completions, sleeps' starts and
journal events (``claim_many.sql``, ``complete_many.sql``, ``sleep_many.sql``,
``journal_many.sql``), the timers loop's fired waits (``fire_many.sql``) and a worker's own,
fired and claimed (``fire_claim.sql``). Each moves the stream heads, updates the rows as
``apply`` would and appends the events in ONE statement, so that a claim, a completion, a
sleep, a journaled step or a batch of fired timers costs one round trip.

The caller (:mod:`awooop.runs.leases.batch`) decides what to do with what comes back: each
:class:`BatchRow` is a run the statement wrote, or one it left as its snapshot saw it, with
whether a newer transaction's stream head was the reason (try again). A completion and
journal events read no row back (:class:`WriteAnswer`: only that the run was written): their
callers have no use for it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

import msgspec

from awooop.core.db import Connection
from awooop.core.events import TimerFired, run_stream_id
from awooop.eventlog import eventlog, queries
from awooop.eventlog.state import RunState, row_to_state

CLAIM_MANY = queries.load("claim_many")
COMPLETE_MANY = queries.load("complete_many")
SLEEP_MANY = queries.load("sleep_many")
JOURNAL_MANY = queries.load("journal_many")
FIRE_MANY = queries.load("fire_many")
FIRE_CLAIM = queries.load("fire_claim")

_json_encoder = msgspec.json.Encoder()


class Served(NamedTuple):
    """A worker's routes and handler version as the claim statements take them
    (``_run_served.sql``; :attr:`awooop.runs.routing.Routes.params`): the contracts and the
    projects it serves (None: every one), and the version of its handler, which each claim
    records and which a contract's required versions must include (None: no test, for a
    statement that claims nothing it runs, as the reaper's)."""

    contracts: list[str] | None = None
    projects: list[str] | None = None
    version: str | None = None


EVERY = Served()


class BatchRow(msgspec.Struct, frozen=True):
    """One run of a batch statement's answer: its state (new if ``written``, else as the
    statement's snapshot saw it), ``conflict`` (locked but a newer transaction wrote its
    stream), the database clock, ``paused`` (claimable, but a pause, its full concurrency key or
    its place in the fair order held it back), ``deferred`` (the last) and ``unserved`` (the
    worker may not take it: its routes or its handler version)."""

    state: RunState
    written: bool
    conflict: bool
    now: datetime
    paused: bool = False
    deferred: bool = False
    unserved: bool = False

    @property
    def run_id(self) -> uuid.UUID:
        return self.state.run_id

    @property
    def answer(self) -> RunState:
        """What a written run answers: its new state."""
        return self.state

    @property
    def seen(self) -> RunState:
        """The run as the statement saw it (new if written)."""
        return self.state


class WriteAnswer(msgspec.Struct, frozen=True):
    """One run of the answer of a fenced write that reads no row back
    (``_written_answer.sql``): ``written``, or refused with its state as the statement's
    snapshot saw it and ``conflict`` (locked, but a newer transaction wrote its stream)."""

    run_id: uuid.UUID
    written: bool
    conflict: bool
    now: datetime
    state: RunState | None  # None when written

    @property
    def answer(self) -> None:
        """What a written run answers: nothing (its row is not read back)."""
        return None

    @property
    def seen(self) -> RunState:
        """The run as the statement saw it (a refused run: a written one has none)."""
        if self.state is None:
            raise ValueError(f"run {self.run_id} was written: no row was read back")
        return self.state


def _json(value: Any) -> str | None:
    """None stays SQL NULL (as the generic write stores it); JSON otherwise."""
    return None if value is None else _json_encoder.encode(value).decode()


def _answers(rows: Sequence[Any]) -> list[WriteAnswer]:
    return [
        WriteAnswer(
            r["answered"],
            r["written"],
            r["conflict"],
            r["db_now"],
            None if r["written"] else row_to_state(r),
        )
        for r in rows
    ]


def _seen(row: Any) -> RunState:
    """A batch answer's run; an unwritten one with its lease as the rule sees it (its worker's
    session too, ``lease_seen``): a state to judge, never to write back."""
    state = row_to_state(row)
    if row["written"]:
        return state
    return msgspec.structs.replace(state, lease_until=row["lease_seen"])


def _rows(rows: Sequence[Any]) -> list[BatchRow]:
    return [
        BatchRow(
            _seen(r),
            r["written"],
            r["conflict"],
            r["db_now"],
            r["paused"],
            r["deferred"],
            r["unserved"],
        )
        for r in rows
    ]


async def claim_many(
    conn: Connection,
    run_ids: Sequence[uuid.UUID],
    metadata: Sequence[dict[str, Any] | None],
    worker_id: str,
    ttl_s: float,
    fair: bool = True,
    served: Served = EVERY,
) -> list[BatchRow]:
    """RunClaimed for each of ``run_ids`` that can be claimed now (``metadata`` aligned with
    them; ``fair``: not a run another project's is ahead of in the fair order; ``served``: the
    worker's routes and handler version); the others as they are."""
    rows = await conn.fetch(
        CLAIM_MANY, list(run_ids), [_json(m) for m in metadata], worker_id, ttl_s, fair, *served
    )
    return _rows(rows)


async def complete_many(
    conn: Connection,
    run_ids: Sequence[uuid.UUID],
    worker_ids: Sequence[str],
    attempts: Sequence[int],
    results: Sequence[Any],
    metadata: Sequence[dict[str, Any] | None],
) -> list[WriteAnswer]:
    """RunCompleted for each run whose ``(worker_id, attempt)`` holds a live lease (the fence is
    the statement's WHERE clause); the others as they are. ``results`` are JSON builtins."""
    rows = await conn.fetch(
        COMPLETE_MANY,
        list(run_ids),
        list(worker_ids),
        list(attempts),
        [_json(r) for r in results],
        [_json(m) for m in metadata],
    )
    return _answers(rows)


async def sleep_many(
    conn: Connection,
    run_ids: Sequence[uuid.UUID],
    worker_ids: Sequence[str],
    attempts: Sequence[int],
    steps: Sequence[str],
    delays_us: Sequence[int | None],
    untils: Sequence[datetime | None],
    metadata: Sequence[dict[str, Any] | None],
) -> list[BatchRow]:
    """A sleep's ``WaitStarted`` for each run whose ``(worker_id, attempt)`` holds a live lease
    (the fence is the statement's WHERE clause), with the wait's row; the others as they are.
    Each sleep is due at its ``until``, or ``delays_us`` microseconds after the database
    clock when that is None."""
    rows = await conn.fetch(
        SLEEP_MANY,
        list(run_ids),
        list(worker_ids),
        list(attempts),
        list(steps),
        list(delays_us),
        list(untils),
        [_json(m) for m in metadata],
    )
    return _rows(rows)


async def journal_many(
    conn: Connection,
    run_ids: Sequence[uuid.UUID],
    worker_ids: Sequence[str],
    attempts: Sequence[int],
    journals: Sequence[str],
    metadata: Sequence[dict[str, Any] | None],
) -> list[WriteAnswer]:
    """Each write's journal events (``journals``: a JSON array of encoded ``ModelCalled`` and
    ``StepCompleted`` events, their ``at`` left to the database clock) for each run whose
    ``(worker_id, attempt)`` holds a live lease on a RUNNING run (the fence is the statement's
    WHERE clause); the others as they are."""
    rows = await conn.fetch(
        JOURNAL_MANY,
        list(run_ids),
        list(worker_ids),
        list(attempts),
        list(journals),
        [_json(m) for m in metadata],
    )
    return _answers(rows)


async def fire_many(
    conn: Connection,
    changes: Sequence[tuple[RunState, TimerFired]],
    metadata: dict[str, Any] | None = None,
) -> list[RunState]:
    """Write each ``TimerFired`` on its run (a state this transaction holds locked WAITING_EVENT,
    each run at most once, every event at the transaction's clock) in one statement
    (``fire_many.sql``): the new states, in order. Raises as
    :func:`awooop.eventlog.eventlog.append_many` does when a stream head refused (the caller's
    transaction must roll back)."""
    if not changes:
        return []
    at = {e.at for _, e in changes}
    if len(at) != 1:
        raise ValueError("fire_many writes every event at one time")
    rows = await conn.fetch(
        FIRE_MANY,
        [s.run_id for s, _ in changes],
        [s.version for s, _ in changes],
        [e.step for _, e in changes],
        [e.kind for _, e in changes],
        [e.due_at for _, e in changes],
        at.pop(),
        _json(metadata or {}),
    )
    written = {r["run_id"]: row_to_state(r) for r in rows}
    for state, _ in changes:
        if state.run_id not in written:
            raise await eventlog.refusal(conn, run_stream_id(state.run_id), state.version)
    return [written[s.run_id] for s, _ in changes]


async def fire_claim(
    conn: Connection,
    held: Sequence[tuple[uuid.UUID, int]],
    worker_id: str,
    ttl_s: float,
    metadata: dict[str, Any] | None = None,
    fair: bool = True,
    served: Served = EVERY,
) -> list[tuple[RunState, bool]]:
    """``TimerFired`` on those of the runs ``held`` names (each at the version given) that still
    wait there with a due wait, and ``RunClaimed`` by ``worker_id`` on top where a claim may
    take the run now (``fair``, ``served``: as :func:`claim_many`), in one statement of its own
    (``fire_claim.sql``): each new state with whether it was claimed. A run locked elsewhere,
    changed since, not due, or whose stream head refused is left out (the timers loop fires it
    later)."""
    if not held:
        return []
    rows = await conn.fetch(
        FIRE_CLAIM,
        [run_id for run_id, _ in held],
        [v for _, v in held],
        worker_id,
        ttl_s,
        fair,
        *served,
        _json(metadata or {}),
    )
    return [(row_to_state(r), r["claimed"]) for r in rows]


async def prepare(conn: Connection) -> None:
    """Parse and plan the batch writes on ``conn`` with empty arrays (they write nothing)."""
    await conn.fetch(CLAIM_MANY, [], [], "", 1.0, True, *EVERY)
    await conn.fetch(COMPLETE_MANY, [], [], [], [], [])
    await conn.fetch(SLEEP_MANY, [], [], [], [], [], [], [])
    await conn.fetch(JOURNAL_MANY, [], [], [], [], [])
    await conn.fetch(FIRE_CLAIM, [], [], "", 1.0, True, *EVERY, "{}")
    await conn.fetch(eventlog.APPEND_MANY, [], [], [], [], [], [], [])
