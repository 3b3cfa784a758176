"""Operator actions on a run: cancel (from any non-terminal state) and retry a failed run.

Cancel applies ``RunCancelled`` and, in the same transaction, notifies the channel
``awooop_run_cancelled`` with the run id: the worker holding the run (if any) cancels its
handler at once (it would otherwise notice at its next heartbeat, when the lease is no longer
renewed, or at its next fenced write, which is refused). Postgres NOTIFY is delivered only on
commit, so a rolled-back cancel notifies nobody. The run's unfinished child runs are cancelled
with it, in the same transaction (:mod:`awooop.eventlog.child_waits`).
"""

from __future__ import annotations

import uuid
from typing import Any

from awooop.core.db import Connection
from awooop.core.errors import InvalidInputError
from awooop.core.events import RunCancelled, RunRetried
from awooop.eventlog.child_waits import CANCEL_CHANNEL as CANCEL_CHANNEL
from awooop.eventlog.state import RunState
from awooop.runs import run_rows

NOTIFY_CANCEL = "SELECT pg_notify($1, $2)"

MAX_REASON = 2000
MAX_EXTRA_ATTEMPTS = 1000


def check_text(name: str, value: str, limit: int) -> str:
    if len(value) > limit:
        raise InvalidInputError(f"{name} must be at most {limit} characters")
    return value


async def cancel(
    conn: Connection,
    run_id: uuid.UUID,
    *,
    actor: str,
    reason: str = "",
    metadata: dict[str, Any] | None = None,
) -> RunState:
    """Cancel ``run_id`` (E-RUN-001 when it is already terminal, E-RUN-003 when unknown)."""
    check_text("actor", actor, 200)
    check_text("reason", reason, MAX_REASON)
    state = await run_rows.record(
        conn, run_id, lambda _s, now: RunCancelled(at=now, actor=actor, reason=reason), metadata
    )
    await conn.execute(NOTIFY_CANCEL, CANCEL_CHANNEL, str(run_id))
    return state


async def retry(
    conn: Connection,
    run_id: uuid.UUID,
    *,
    actor: str,
    extra_attempts: int,
    metadata: dict[str, Any] | None = None,
) -> RunState:
    """Send a FAILED run back to PENDING with ``extra_attempts`` more attempts."""
    check_text("actor", actor, 200)
    if not 1 <= extra_attempts <= MAX_EXTRA_ATTEMPTS:
        raise InvalidInputError(f"extra attempts must be between 1 and {MAX_EXTRA_ATTEMPTS}")
    return await run_rows.record(
        conn,
        run_id,
        lambda s, now: RunRetried(
            at=now, actor=actor, max_attempts=s.attempt_count + extra_attempts
        ),
        metadata,
    )
