"""Concurrency limits (flow control): the rows of ``awooop_concurrency_limits`` (migration
0132) and the usage of keys.

A limit belongs to a contract or a channel of a project (a contract's limit wins over its
channel's). Intake computes each new run's key and the key's maximum from it, once
(:func:`awooop.runs.concurrency_rules.run_key`), and refuses a submission whose key already
has ``depth_cap`` runs queued (:mod:`awooop.ingest.depth`). Every claim statement then admits
a keyed run only while fewer than its maximum of the key's runs hold a slot (RUNNING with a
live lease: ``awooop/eventlog/sql/_run_admitted.sql``, migration 0135), and, with
``global_max``, while fewer than that many of the scope's runs do. A refused run stays PENDING
(``blocked_on``: ``over_concurrency_limit``); the polling path takes it once a slot frees. A
run waiting for its tool holds no slot: :func:`readmit` lets its attempt continue
(:mod:`awooop.worker.tool_waits`).

These functions run in a tenant transaction of the project (row-level security) or on the
platform role.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from awooop.core.db import Connection
from awooop.core.errors import ConcurrencyLimitNotFoundError, InvalidInputError, LeaseLostError
from awooop.core.logs import get_logger
from awooop.eventlog import queries
from awooop.eventlog.state import RunState
from awooop.runs import run_rows
from awooop.runs.blocked import Reason
from awooop.runs.concurrency_rules import Limit, check_limit
from awooop.runs.leases.rules import fence_problem
from awooop.runs.pause_rules import MAX_ACTOR, Scope, check_text, describe_scope

log = get_logger(__name__)

SET = queries.load("concurrency_limit_set")
REMOVE = queries.load("concurrency_limit_remove")
LIST = queries.load("concurrency_limit_list")
USAGE = queries.load("concurrency_usage")
SCOPE_USAGE = queries.load("concurrency_scope_usage")
READMIT = queries.load("concurrency_readmit")
WAIT_SET = queries.load("llm_wait_set")  # the attempt's flow-control wait (blocked_on)
WAIT_END = queries.load("llm_wait_end")
OVER_LIMIT = Reason.OVER_CONCURRENCY_LIMIT.value  # the wait's reason


@dataclass(frozen=True)
class StoredLimit:
    project_id: str
    scope: str  # 'channel' or 'contract'
    scope_key: str
    key_expr: str
    max_expr: str
    global_max: int | None
    depth_cap: int | None
    set_by: str
    set_at: datetime


@dataclass(frozen=True)
class KeyUsage:
    project_id: str
    scope: str | None
    key: str
    executing: int
    waiting: int
    max: int | None
    oldest_waiting_at: datetime | None


@dataclass(frozen=True)
class ScopeUsage:
    scope: str | None  # how runs name the limit's scope: channel:<type>, contract:<id>
    keys: int
    executing: int
    waiting: int


def _stored(row: Any) -> StoredLimit:
    return StoredLimit(**{f: row[f] for f in StoredLimit.__dataclass_fields__})


def scope_name(scope: Scope, key: str) -> str:
    """Pure: how runs name a limit's scope (``contract:<id>``, ``channel:<type>``)."""
    if scope is Scope.PROJECT:
        raise InvalidInputError("a concurrency limit belongs to a channel or a contract")
    return f"{scope.value}:{key}"


async def set_limit(
    conn: Connection,
    project_id: str,
    scope: Scope,
    key: str,
    *,
    key_expr: str,
    max_expr: str,
    global_max: int | None,
    depth_cap: int | None,
    actor: str,
) -> StoredLimit:
    """Make or replace the limit of a channel or contract (expressions checked first)."""
    check_text("actor", actor, MAX_ACTOR, empty=False)
    check_limit(Limit(scope_name(scope, key), key_expr, max_expr, global_max, depth_cap))
    row = await conn.fetchrow(
        SET, project_id, scope.value, key, key_expr, max_expr, global_max, depth_cap, actor
    )
    log.info(
        "concurrency_limit_set",
        project_id=project_id,
        scope=describe_scope(scope, key),
        key_expr=key_expr,
        max_expr=max_expr,
        actor=actor,
    )
    return _stored(row)


async def remove_limit(
    conn: Connection, project_id: str, scope: Scope, key: str, *, actor: str
) -> StoredLimit:
    """Drop the limit of a channel or contract (E-CONCURRENCY-002 if none)."""
    row = await conn.fetchrow(REMOVE, project_id, scope.value, key)
    if row is None:
        raise ConcurrencyLimitNotFoundError(
            f"{describe_scope(scope, key)} of project {project_id} has no concurrency limit",
            project_id=project_id,
        )
    log.info("concurrency_limit_removed", project_id=project_id, actor=actor)
    return _stored(row)


async def listing(conn: Connection, project_id: str | None, limit: int = 1000) -> list[StoredLimit]:
    return [_stored(row) for row in await conn.fetch(LIST, project_id, limit)]


async def usage(conn: Connection, project_id: str | None, top: int = 20) -> list[KeyUsage]:
    """The ``top`` keys with the most runs waiting, then executing."""
    return [
        KeyUsage(
            project_id=row["project_id"],
            scope=row["concurrency_scope"],
            key=row["concurrency_key"],
            executing=row["executing"],
            waiting=row["waiting"],
            max=row["max"],
            oldest_waiting_at=row["oldest_waiting_at"],
        )
        for row in await conn.fetch(USAGE, project_id, top)
    ]


async def scope_usage(conn: Connection, project_id: str) -> list[ScopeUsage]:
    """Per scope of ``project_id``: its keys with live runs, runs executing and waiting."""
    return [
        ScopeUsage(
            scope=row["concurrency_scope"],
            keys=row["keys"],
            executing=row["executing"],
            waiting=row["waiting"],
        )
        for row in await conn.fetch(SCOPE_USAGE, project_id)
    ]


async def readmit(
    conn: Connection, run_id: uuid.UUID, worker_id: str, attempt: int
) -> tuple[RunState, bool]:
    """Lock the run's row for ``(worker_id, attempt)`` (E-RUN-002 unless the attempt still
    holds a live lease) and take a slot of its concurrency key for it: the state and True
    when the attempt may continue (no key, or admitted), False when the key is full. Only in
    the transaction that writes the attempt's return to RUNNING: the slot is that write's."""
    state, now = await run_rows.lock(conn, run_id)
    problem = fence_problem(state, now, worker_id, attempt)
    if problem is not None:
        raise LeaseLostError(
            f"write refused: {problem}", run_id=run_id, worker_id=worker_id, attempt=attempt
        )
    if state.concurrency_key is None:
        return state, True
    admitted = await conn.fetchval(
        READMIT,
        state.project_id,
        state.concurrency_scope,
        state.concurrency_key,
        state.concurrency_max,
    )
    return state, bool(admitted)


async def note_slot_wait(
    conn: Connection, state: RunState, attempt: int, detail: str, until: datetime
) -> None:
    """Record that ``attempt`` of the run waits for a slot of its key (blocked_on)."""
    await conn.execute(
        WAIT_SET,
        state.run_id,
        state.project_id,
        attempt,
        OVER_LIMIT,
        state.concurrency_key or "",
        detail[:500],
        until,
    )


async def end_slot_wait(conn: Connection, run_id: uuid.UUID, attempt: int) -> None:
    await conn.execute(WAIT_END, run_id, attempt)
