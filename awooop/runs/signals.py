"""Signals: named events sent to a run, delivered to its ``run.wait_for_event`` (docs/workers.md).

A signal is a row of ``awooop_signals`` (migration 0141), sent by

- :func:`send` (the management API and the CLI, a tenant transaction of the run's project):
  it locks the run's row, refuses a finished run (E-SIGNAL-002), writes the signal and, when the
  run waits for an event of that name whose ``match`` the payload contains, delivers it at
  once (``SignalDelivered``: RESUMED) in the same transaction;
- :func:`send_pending` (the producer library, inside the caller's transaction): a producer
  login may not write a run's events, so it writes the row ``pending``; the ``timers`` loop
  delivers it (:func:`deliver_pending`, woken by the row's notification at commit).

Every delivery holds the run's row lock and looks at the run's open wait under it, as the
timers loop does before a timeout fires (:mod:`awooop.runs.timers`) and the worker before its
wait starts (:func:`take_or_wait`): of a signal and a timeout at the same instant, exactly one
ends the wait; a signal is delivered once (``delivered_at``, under the lock); a signal that
comes before the wait is kept and taken when the wait starts. The same ``key`` for the same run
is one signal: a repeat writes nothing and answers the first one (``duplicate``).

Bounds: a name and a key of 1 to 200 characters, a payload of at most
AWOOOP_SIGNAL_PAYLOAD_MAX_BYTES as JSON, at most AWOOOP_SIGNALS_PER_RUN_MAX undelivered signals
kept per run (E-SIGNAL-003). Every refusal writes nothing; a run of another project is not seen
(row-level security): E-RUN-003, as a run that does not exist.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import msgspec

from awooop.core.db import Connection
from awooop.core.errors import (
    InvalidInputError,
    PayloadTooLargeError,
    RunNotFoundError,
    SignalLimitError,
    SignalRunFinishedError,
    check_transaction_tenant,
)
from awooop.core.events import SignalDelivered, StepCompleted, WaitStarted
from awooop.core.querier import Querier
from awooop.eventlog import queries, run_reads
from awooop.eventlog.runs import apply_and_store
from awooop.eventlog.state import TERMINAL, RunState, RunStatus, row_to_state
from awooop.eventlog.wait_state import EVENT
from awooop.runs import run_rows
from awooop.runs.leases import fenced_record
from awooop.runs.timers import Traced, untraced

MAX_NAME_LENGTH = 200
MAX_KEY_LENGTH = 200

# --- SQL -------------------------------------------------------------------------------------
INSERT = """
INSERT INTO awooop_signals
    (signal_id, project_id, run_id, name, signal_key, payload, sent_by, pending)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (run_id, signal_key) DO NOTHING
RETURNING signal_id
"""
BY_KEY = """
SELECT signal_id, name, delivered_at, step FROM awooop_signals
WHERE run_id = $1 AND signal_key = $2
"""
KEPT = """
SELECT count(*) FROM awooop_signals WHERE run_id = $1 AND delivered_at IS NULL
"""
RUN_STATUS = "SELECT status FROM awooop_run_state WHERE run_id = $1"
# The producer's transaction: its tenant setting, and whether its login is bound to $1.
GUARD = """
SELECT current_setting('awooop.project_id', true) AS tenant, awooop_tenant_bound($1) AS bound
"""
# The run's open wait (read under the run's row lock: every change of it holds that lock).
WAIT = "SELECT step, kind, name, match FROM awooop_run_waits WHERE run_id = $1"
# The oldest kept signal of that name whose payload contains the wait's match, locked.
OLDEST = """
SELECT signal_id, signal_key, payload, sent_by FROM awooop_signals
WHERE run_id = $1 AND name = $2 AND delivered_at IS NULL
  AND ($3::jsonb IS NULL OR payload @> $3::jsonb)
ORDER BY sent_at, signal_id
LIMIT 1
FOR UPDATE
"""
MARK_ENDED = queries.load("signals_mark_ended")
INSERT_PENDING = queries.load("signals_insert_pending")
MARK_DELIVERED = """
UPDATE awooop_signals SET delivered_at = $2, step = $3, pending = false WHERE signal_id = $1
"""
PENDING_RUNS = """
SELECT run_id FROM awooop_signals WHERE pending ORDER BY sent_at LIMIT $1
"""
CLEAR_PENDING = """
UPDATE awooop_signals SET pending = false WHERE run_id = ANY($1::uuid[]) AND pending
"""
# ---------------------------------------------------------------------------------------------


class Sent(msgspec.Struct, frozen=True, kw_only=True):
    """What a sender gets: the signal, and whether this call delivered it to a waiting run
    (False: kept until a wait of its name takes it), or found it sent before with that key."""

    signal_id: uuid.UUID
    run_id: uuid.UUID
    name: str
    key: str
    delivered: bool = False
    duplicate: bool = False


def check_name(name: str, what: str = "signal name") -> str:
    """Pure: a signal's (or an event wait's) name: 1 to 200 characters, no control ones."""
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_NAME_LENGTH:
        raise InvalidInputError(f"a {what} has 1 to {MAX_NAME_LENGTH} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise InvalidInputError(f"a {what} has no control characters")
    return name


def check_key(key: str) -> str:
    """Pure: a signal's idempotency key, 1 to 200 characters."""
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY_LENGTH:
        raise InvalidInputError(f"a signal key has 1 to {MAX_KEY_LENGTH} characters")
    return key


def check_payload(payload: Any, max_bytes: int) -> Any:
    """Pure: the payload as JSON builtins, at most ``max_bytes`` encoded (E-INPUT-003)."""
    try:
        encoded = msgspec.json.encode(payload)
    except (TypeError, msgspec.EncodeError) as exc:
        raise InvalidInputError(f"a signal's payload must be JSON: {exc}") from None
    if len(encoded) > max_bytes:
        raise PayloadTooLargeError(
            f"a signal's payload is at most {max_bytes} bytes as JSON ({len(encoded)} given)"
        )
    if "\\u0000" in encoded.decode():
        raise InvalidInputError("a signal's payload cannot hold the character \\u0000")
    return msgspec.json.decode(encoded)


def check_match(match: Any) -> dict[str, Any] | None:
    """Pure: a wait's ``match``: None, or a JSON object the signal's payload must contain."""
    if match is None:
        return None
    if not isinstance(match, dict):
        raise InvalidInputError("match is a JSON object the signal's payload must contain")
    checked: dict[str, Any] = check_payload(match, 64 * 1024)
    return checked


async def send(
    conn: Connection,
    run_id: uuid.UUID,
    name: str,
    payload: Any,
    *,
    key: str,
    sent_by: str,
    payload_max_bytes: int,
    kept_max: int,
    metadata: dict[str, Any] | None = None,
) -> Sent:
    """Send a signal to ``run_id`` and deliver it if the run waits for it (module doc); a
    tenant transaction of the run's project. Refusals raise and write nothing."""
    check_name(name)
    check_key(key)
    payload = check_payload(payload, payload_max_bytes)
    found = await run_rows.lock_if_present(conn, run_id)
    if found is None:
        raise RunNotFoundError(run_id=run_id)
    state, now = found
    repeat = await _repeat(conn, run_id, name, key)
    if repeat is not None:
        return repeat
    if state.status in TERMINAL:
        raise SignalRunFinishedError(run_id=run_id, status=state.status)
    await _check_kept(conn, run_id, kept_max)
    signal_id = uuid.uuid4()
    await conn.fetchval(
        INSERT, signal_id, state.project_id, run_id, name, key, payload, sent_by, False
    )
    delivered = await deliver_to_wait(conn, state, now, metadata)
    return Sent(
        signal_id=signal_id,
        run_id=run_id,
        name=name,
        key=key,
        delivered=delivered is not None and delivered.signal_id == signal_id,
    )


async def send_pending(
    conn: Querier,
    project_id: str,
    run_id: uuid.UUID,
    name: str,
    payload: Any,
    *,
    key: str,
    sent_by: str,
    payload_max_bytes: int,
    kept_max: int,
) -> Sent:
    """The producer's send: the row only, ``pending`` (the timers loop delivers it), in the
    caller's transaction, which carries the tenant. Refusals raise and write nothing."""
    check_name(name)
    check_key(key)
    payload = check_payload(payload, payload_max_bytes)
    guard = await conn.fetchrow(GUARD, project_id)
    assert guard is not None  # one row, always
    check_transaction_tenant(project_id, guard["tenant"] or None, guard["bound"])
    status = await conn.fetchval(RUN_STATUS, run_id)
    if status is None:
        raise RunNotFoundError(run_id=run_id)
    repeat = await _repeat(conn, run_id, name, key)
    if repeat is not None:
        return repeat
    if RunStatus(status) in TERMINAL:
        raise SignalRunFinishedError(run_id=run_id, status=status)
    await _check_kept(conn, run_id, kept_max)
    signal_id = uuid.uuid4()
    written = await conn.fetchval(
        INSERT_PENDING,
        signal_id,
        project_id,
        run_id,
        name,
        key,
        msgspec.json.encode(payload).decode(),
        sent_by,
    )
    if written is None:  # the same key, committed by another sender meanwhile
        repeat = await _repeat(conn, run_id, name, key)
        assert repeat is not None
        return repeat
    return Sent(signal_id=signal_id, run_id=run_id, name=name, key=key)


async def _repeat(conn: Querier, run_id: uuid.UUID, name: str, key: str) -> Sent | None:
    row = await conn.fetchrow(BY_KEY, run_id, key)
    if row is None:
        return None
    return Sent(
        signal_id=row["signal_id"],
        run_id=run_id,
        name=row["name"],
        key=key,
        delivered=row["delivered_at"] is not None,
        duplicate=True,
    )


async def _check_kept(conn: Querier, run_id: uuid.UUID, kept_max: int) -> None:
    if await conn.fetchval(KEPT, run_id) >= kept_max:
        raise SignalLimitError(run_id=run_id, kept=kept_max)


async def deliver_to_wait(
    conn: Connection, state: RunState, now: datetime, metadata: dict[str, Any] | None = None
) -> SignalDelivered | None:
    """Under the run's row lock (``state`` is the locked row): deliver the oldest kept signal
    that answers the run's open event wait, if it waits for one; None: nothing delivered."""
    if state.status is not RunStatus.WAITING_EVENT:
        return None
    wait = await conn.fetchrow(WAIT, state.run_id)
    if wait is None or wait["kind"] != EVENT:
        return None
    signal = await conn.fetchrow(OLDEST, state.run_id, wait["name"], wait["match"])
    if signal is None:
        return None
    event = SignalDelivered(
        at=now,
        step=wait["step"],
        name=wait["name"],
        signal_id=signal["signal_id"],
        key=signal["signal_key"],
        payload=signal["payload"],
        sent_by=signal["sent_by"],
    )
    await apply_and_store(conn, state, event, metadata)
    await conn.execute(MARK_DELIVERED, signal["signal_id"], now, wait["step"])
    return event


async def deliver_pending(
    conn: Connection, limit: int, *, traced: Traced = untraced
) -> tuple[int, int]:
    """The timers loop: deliver the pending signals (the producer's) of up to ``limit`` signals'
    runs, each under its run's row lock; platform role. Returns (signals looked at, delivered).
    ``traced``: entered around the deliveries, when there are runs to look at (its metadata
    is the events')."""
    rows = await conn.fetch(PENDING_RUNS, limit)
    runs = sorted({r["run_id"] for r in rows})
    delivered = 0
    locked = await conn.fetch(run_reads.LOCK_MANY, runs) if runs else []
    with traced(len(locked)) if locked else untraced(0) as metadata:
        for row in locked:
            if await deliver_to_wait(conn, row_to_state(row), row["db_now"], metadata):
                delivered += 1
    if runs:
        await conn.execute(CLEAR_PENDING, runs)
        ended = [r["run_id"] for r in locked if RunStatus(r["status"]) in TERMINAL]
        if ended:  # sent as its run finished: kept for the retention (migration 0142)
            await conn.execute(MARK_ENDED, ended)
    return len(rows), delivered


async def take_or_wait(
    conn: Connection,
    run_id: uuid.UUID,
    worker_id: str,
    attempt: int,
    *,
    step: str,
    name: str,
    match: dict[str, Any] | None,
    time_out: timedelta | None,
    due_at: datetime | None,
    metadata: dict[str, Any] | None = None,
) -> tuple[bool, Any]:
    """The worker's wait start, fenced (a tenant transaction of the run's project): the oldest
    kept signal of ``name`` that contains ``match`` is taken (journaled as step ``step``:
    ``(True, payload)``), else the run starts waiting (``WaitStarted``: WAITING_EVENT, its
    lease released; timeout at ``due_at``, else ``time_out`` from now: ``(False, None)``)."""
    state, now = await run_rows.lock(conn, run_id)
    signal = (
        await conn.fetchrow(OLDEST, run_id, name, match)
        if state.status is RunStatus.RUNNING
        else None
    )
    if signal is not None:
        # The step's event is the taken signal's record once the retention deletes its row.
        taken = {
            "signal_id": str(signal["signal_id"]),
            "key": signal["signal_key"],
            "sent_by": signal["sent_by"],
        }
        await fenced_record(
            conn,
            run_id,
            worker_id,
            attempt,
            lambda _s, at: StepCompleted(
                at=at, worker_id=worker_id, attempt=attempt, step=step, result=signal["payload"]
            ),
            {**(metadata or {}), "signal": taken},
        )
        await conn.execute(MARK_DELIVERED, signal["signal_id"], now, step)
        return True, signal["payload"]
    await fenced_record(
        conn,
        run_id,
        worker_id,
        attempt,
        lambda _s, at: WaitStarted(
            at=at,
            worker_id=worker_id,
            attempt=attempt,
            step=step,
            kind=EVENT,
            name=name,
            match=match,
            due_at=due_at or (None if time_out is None else at + time_out),
        ),
        metadata,
    )
    return False, None
