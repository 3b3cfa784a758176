"""One batch of a bulk operation (:mod:`awooop.runs.bulk`): which of the locked runs still
match the filter, the event each gets, and writing them all at once, else run by run.

A refusal is the run's own: errors that say Postgres is away or two transactions got in each
other's way (:data:`TRANSIENT`) are raised instead, so the whole batch is tried again (the
transaction's retries, or the next executor) and no run is refused for them.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import asyncpg

from awooop.core.db import Connection
from awooop.core.errors import AwoooPError, StatementRefusedError
from awooop.core.events import Event, RunCancelled, RunRetried
from awooop.core.retries import CONNECTION_ERRORS, RETRYABLE_PG_ERRORS
from awooop.eventlog.runs import apply_and_store, apply_and_store_many
from awooop.eventlog.state import RunState
from awooop.runs import listing

# Failures that are not a run's own: Postgres away, or a conflict the whole transaction is
# retried for. write_batch raises them rather than refusing a run the next attempt would change.
TRANSIENT: tuple[type[BaseException], ...] = RETRYABLE_PG_ERRORS + CONNECTION_ERRORS


def matches(f: listing.RunFilter, state: RunState) -> bool:
    """Pure: whether a locked run still matches the filter's SQL part (the reason aside; the
    search is decided by the batch's own read, in its transaction: what it looks at, the
    input, result and failure reason, changes only with the status checked here)."""
    allowed = listing.statuses(f)
    key = f.q
    return (
        (allowed is None or state.status.value in allowed)
        and (f.project is None or state.project_id == f.project)
        and (f.channel is None or state.channel_type == f.channel)
        and (f.since is None or state.created_at >= f.since)
        and (key is None or key in (str(state.run_id), state.provider_event_id))
        and (not f.exclude_codes or state.failure_code not in f.exclude_codes)
    )


def event_for(
    kind: str,
    person: str,
    state: RunState,
    now: datetime,
    *,
    extra_attempts: int | None,
    reason: str,
) -> Event:
    """Pure: the event a ``kind`` action by ``person`` writes to the run in ``state``."""
    if kind == "retry":
        return RunRetried(
            at=now, actor=person, max_attempts=state.attempt_count + (extra_attempts or 3)
        )
    return RunCancelled(at=now, actor=person, reason=reason)


def refusal(run_id: uuid.UUID, exc: AwoooPError) -> dict[str, Any]:
    return {"run_id": str(run_id), "code": exc.code, "message": exc.message[:300]}


async def write_batch(
    conn: Connection, changes: list[tuple[RunState, Event]], metadata: dict[str, Any]
) -> tuple[list[RunState], list[dict[str, Any]]]:
    """The batch's events at once, or run by run in savepoints when Postgres refuses it: the
    runs written and the refusals (a refused run leaves nothing: its savepoint takes back its
    row and its event)."""
    try:
        async with conn.transaction():
            return await apply_and_store_many(conn, changes, metadata), []
    except TRANSIENT:
        raise
    except asyncpg.PostgresError:
        pass
    written: list[RunState] = []
    errors: list[dict[str, Any]] = []
    for state, event in changes:
        try:
            async with conn.transaction():
                written.append(await apply_and_store(conn, state, event, metadata))
        except TRANSIENT:
            raise
        except asyncpg.PostgresError as exc:
            errors.append(
                {
                    "run_id": str(state.run_id),
                    "code": StatementRefusedError.code,
                    "message": str(exc)[:300],
                }
            )
    return written, errors
