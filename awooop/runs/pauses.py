"""Pause and resume (flow control): the rows of ``awooop_flow_pauses`` (migration 0130).

- :func:`pause` makes the active pause of a scope (the project, one of its channels or one of
  its contracts), or finds the one there is: pausing twice is one pause. From its commit on,
  no claim statement takes a run of the scope (``awooop/eventlog/sql/_run_paused.sql``: every
  claim path tests it on the row it locks), on every worker at once. Intake goes on accepting
  and deduplicating; running attempts finish. A worker that meets a paused run acknowledges
  its message: the run stays PENDING in Postgres, where its ``blocked_on`` says ``paused``.
- :func:`resume` ends the pause (the row keeps who resumed it and when: the table is the
  history) and, in the same transaction, notifies :data:`RESUME_CHANNEL` with the project id.
  The notice is a doorbell: each worker polls at once for dispatchable runs that waited since
  the resume (``awooop.worker.runtime``: oldest first, as many as it has free slots, again as
  slots free up), so the held-back runs start in order without a message or an event per run.
  A worker that missed the notice still takes them at its next poll interval.

Both run in a tenant transaction of the project (row-level security: a project's token
cannot see or change another project's pauses) or on the platform role.
"""

from __future__ import annotations

from typing import Any

from awooop.core.db import Connection
from awooop.core.errors import AwoooPError, PauseNotFoundError
from awooop.core.logs import get_logger
from awooop.eventlog import queries
from awooop.runs.pause_rules import (
    MAX_ACTOR,
    MAX_REASON,
    Pause,
    Scope,
    check_text,
    describe_scope,
)

log = get_logger(__name__)

RESUME_CHANNEL = "awooop_flow_resumed"

SET = queries.load("pause_set")
RESUME = queries.load("pause_resume")
LIST = queries.load("pause_list")
NOTIFY = "SELECT pg_notify($1, $2)"
SET_TRIES = 3  # a concurrent resume between the insert and the read: read again


def _pause(row: Any) -> Pause:
    return Pause(
        pause_id=str(row["pause_id"]),
        project_id=row["project_id"],
        scope=Scope(row["scope"]),
        scope_key=row["scope_key"],
        reason=row["reason"],
        paused_by=row["paused_by"],
        paused_at=row["paused_at"],
        resumed_by=row["resumed_by"],
        resumed_at=row["resumed_at"],
    )


async def pause(
    conn: Connection, project_id: str, scope: Scope, key: str, *, reason: str, actor: str
) -> tuple[Pause, bool]:
    """The active pause of the scope, and whether this call made it."""
    check_text("reason", reason, MAX_REASON)
    check_text("actor", actor, MAX_ACTOR, empty=False)
    for _ in range(SET_TRIES):
        row = await conn.fetchrow(SET, project_id, scope.value, key, reason, actor)
        if row is not None:
            made = _pause(row)
            if row["created"]:
                log.info(
                    "flow_paused",
                    project_id=project_id,
                    scope=describe_scope(scope, key),
                    actor=actor,
                    reason=reason,
                )
            return made, bool(row["created"])
    raise AwoooPError(f"pausing {describe_scope(scope, key)} of {project_id} kept racing")


async def resume(conn: Connection, project_id: str, scope: Scope, key: str, *, actor: str) -> Pause:
    """End the active pause of the scope and ring the workers (E-PAUSE-001 if none)."""
    check_text("actor", actor, MAX_ACTOR, empty=False)
    row = await conn.fetchrow(RESUME, project_id, scope.value, key, actor)
    if row is None:
        raise PauseNotFoundError(
            f"{describe_scope(scope, key)} of project {project_id} is not paused",
            project_id=project_id,
        )
    await conn.execute(NOTIFY, RESUME_CHANNEL, project_id)
    log.info("flow_resumed", project_id=project_id, scope=describe_scope(scope, key), actor=actor)
    return _pause(row)


async def listing(
    conn: Connection, project_id: str | None, *, history: bool = False, limit: int = 1000
) -> list[Pause]:
    """The active pauses (with ``history``, the resumed ones too), newest first."""
    return [_pause(row) for row in await conn.fetch(LIST, project_id, history, limit)]
