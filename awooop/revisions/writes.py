"""The revision write path: create, activate, and find the revision a rollback returns to.

These run inside the caller's tenant transaction (R-43: row-level security hides other
projects' revisions, so "another project's revision" is simply not found);
:class:`awooop.revisions.service.Revisions` runs each in its own transaction with retries.

Activation (R-21, R-30), in one transaction:
1. lock the pointer row (``FOR UPDATE``) and read the current revision;
2. check the target revision exists in this project (E-REVISION-001), belongs to this
   contract (E-REVISION-004) and has a body its family can use (E-REVISION-006: checked when
   it was created, and again here for a revision stored before a rule existed);
3. optimistic check: when the caller names the revision it expects to be current, a
   different current revision (a concurrent activation won) is E-REVISION-002 (409);
4. move the pointer, append ``RevisionActivated`` to the revision stream, insert the
   ``awooop_contract_outbox`` row (with the caller's traceparent, R-50).
Any error (or the fault hook, for tests) rolls all three back together: a failed activation
leaves neither a pointer move nor a notice behind.

Races written down: two activations of one contract serialise on the pointer row lock (the
second re-reads the pointer after the first commits, so it sees the first's revision); the
very first activation has no row to lock, so two first activations race on the primary key:
``INSERT ... ON CONFLICT DO NOTHING`` makes the loser see zero rows, and it is retried (or
refused with E-REVISION-002 when it named an expected revision). A ``create`` and an
activation of the same contract race on the revision stream's version (E-EVENT-001): the
loser's whole transaction is retried, which re-runs its checks.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from awooop.core.db import Connection
from awooop.core.errors import (
    NoActiveRevisionError,
    NothingToRollBackError,
    RevisionConflictError,
    RevisionContractMismatchError,
    RevisionNotFoundError,
)
from awooop.core.events import RevisionActivated, RevisionCreated, revision_stream_id
from awooop.core.telemetry import inject
from awooop.eventlog import eventlog
from awooop.revisions.body import body_hash, check_names, validate_body
from awooop.revisions.reads import SELECT_POINTER
from awooop.revisions.records import ANY, Activation, Expected, Revision

# --- SQL -----------------------------------------------------------------------------------

INSERT_REVISION = """
INSERT INTO awooop_contract_revisions (project_id, contract_family, contract_id, body, body_hash)
VALUES ($1, $2, $3, $4::jsonb, $5)
RETURNING revision_id, created_at
"""

STREAM_VERSION = "SELECT version FROM awooop_event_streams WHERE stream_id = $1"

LOCK_POINTER = """
SELECT active_revision_id FROM awooop_active_revisions
WHERE project_id = $1 AND contract_family = $2 AND contract_id = $3
FOR UPDATE
"""

REVISION_META = """
SELECT revision_id, contract_family, contract_id, body_hash, body
FROM awooop_contract_revisions WHERE revision_id = $1
"""

INSERT_POINTER = """
INSERT INTO awooop_active_revisions (project_id, contract_family, contract_id, active_revision_id)
VALUES ($1, $2, $3, $4)
ON CONFLICT DO NOTHING
RETURNING updated_at
"""

UPDATE_POINTER = """
UPDATE awooop_active_revisions SET active_revision_id = $4, updated_at = now()
WHERE project_id = $1 AND contract_family = $2 AND contract_id = $3
RETURNING updated_at
"""

INSERT_OUTBOX = """
INSERT INTO awooop_contract_outbox (event_type, project_id, contract_family, contract_id,
                                    old_revision_id, new_revision_id, traceparent)
VALUES ($1, $2, $3, $4, $5, $6, $7)
RETURNING event_id
"""

LAST_ACTIVATION = """
SELECT (data->>'old_revision_id')::uuid AS old_revision_id,
       (data->>'new_revision_id')::uuid AS new_revision_id
FROM awooop_events
WHERE stream_id = $1 AND event_type = 'RevisionActivated'
ORDER BY version DESC LIMIT 1
"""

OUTBOX_EVENT_TYPE = "revision_activated"


class Stage(enum.StrEnum):
    """Points inside the activation transaction where the fault hook is called."""

    POINTER_UPDATED = "pointer_updated"
    EVENT_APPENDED = "event_appended"
    OUTBOX_WRITTEN = "outbox_written"


FaultHook = Callable[[Stage, Connection], Awaitable[None]]


class LostFirstActivationRace(Exception):
    """A concurrent first activation inserted the pointer row first: the service retries."""


async def _stream_version(conn: Connection, stream_id: str) -> int:
    version: int | None = await conn.fetchval(STREAM_VERSION, stream_id)
    return version or 0


async def create_revision(
    conn: Connection,
    project_id: str,
    family: str,
    contract_id: str,
    body: Any,
    metadata: dict[str, Any] | None = None,
) -> Revision:
    check_names(project_id, family, contract_id)
    validate_body(project_id, family, contract_id, body)
    digest = body_hash(body)
    row = await conn.fetchrow(INSERT_REVISION, project_id, family, contract_id, body, digest)
    assert row is not None
    stream_id = revision_stream_id(project_id, family, contract_id)
    event = RevisionCreated(
        at=row["created_at"],
        revision_id=row["revision_id"],
        contract_family=family,
        contract_id=contract_id,
        body_hash=digest,
    )
    await eventlog.append(
        conn, stream_id, project_id, await _stream_version(conn, stream_id), [event], metadata
    )
    return Revision(
        revision_id=row["revision_id"],
        project_id=project_id,
        contract_family=family,
        contract_id=contract_id,
        body_hash=digest,
        created_at=row["created_at"],
        body=body,
    )


async def activate_revision(
    conn: Connection,
    project_id: str,
    family: str,
    contract_id: str,
    revision_id: uuid.UUID,
    *,
    expected: Expected = ANY,
    actor: str = "system",
    metadata: dict[str, Any] | None = None,
    fault: FaultHook | None = None,
) -> Activation:
    """Move the pointer, append the event and write the outbox row (see the module doc)."""
    check_names(project_id, family, contract_id)
    current_row = await conn.fetchrow(LOCK_POINTER, project_id, family, contract_id)
    current: uuid.UUID | None = None if current_row is None else current_row["active_revision_id"]
    target = await conn.fetchrow(REVISION_META, revision_id)
    if target is None:
        raise RevisionNotFoundError(project_id=project_id, revision_id=revision_id)
    if (target["contract_family"], target["contract_id"]) != (family, contract_id):
        raise RevisionContractMismatchError(
            revision_id=revision_id,
            belongs_to=f"{target['contract_family']}/{target['contract_id']}",
        )
    validate_body(project_id, family, contract_id, target["body"])
    if expected is not ANY and expected != current:
        raise RevisionConflictError(expected=expected, actual=current)
    if current == revision_id:
        return Activation(
            project_id=project_id,
            contract_family=family,
            contract_id=contract_id,
            old_revision_id=current,
            new_revision_id=revision_id,
            changed=False,
        )
    if current is None:
        at = await conn.fetchval(INSERT_POINTER, project_id, family, contract_id, revision_id)
        if at is None:  # a concurrent first activation won the primary key
            if expected is ANY:
                raise LostFirstActivationRace
            raise RevisionConflictError(expected=expected, actual="(changed concurrently)")
    else:
        at = await conn.fetchval(UPDATE_POINTER, project_id, family, contract_id, revision_id)
    if fault is not None:
        await fault(Stage.POINTER_UPDATED, conn)
    stream_id = revision_stream_id(project_id, family, contract_id)
    event = RevisionActivated(
        at=at,
        contract_family=family,
        contract_id=contract_id,
        old_revision_id=current,
        new_revision_id=revision_id,
        actor=actor,
    )
    await eventlog.append(
        conn, stream_id, project_id, await _stream_version(conn, stream_id), [event], metadata
    )
    if fault is not None:
        await fault(Stage.EVENT_APPENDED, conn)
    traceparent, _ = inject()
    event_id = await conn.fetchval(
        INSERT_OUTBOX,
        OUTBOX_EVENT_TYPE,
        project_id,
        family,
        contract_id,
        current,
        revision_id,
        traceparent,
    )
    if fault is not None:
        await fault(Stage.OUTBOX_WRITTEN, conn)
    return Activation(
        project_id=project_id,
        contract_family=family,
        contract_id=contract_id,
        old_revision_id=current,
        new_revision_id=revision_id,
        changed=True,
        event_id=event_id,
        at=at,
    )


async def previous_revision(
    conn: Connection, project_id: str, family: str, contract_id: str
) -> tuple[uuid.UUID, uuid.UUID]:
    """(current, the revision active before it) for a rollback without an explicit target."""
    pointer = await conn.fetchrow(SELECT_POINTER, project_id, family, contract_id)
    if pointer is None:
        raise NoActiveRevisionError(project_id=project_id, contract=f"{family}/{contract_id}")
    current: uuid.UUID = pointer["active_revision_id"]
    last = await conn.fetchrow(LAST_ACTIVATION, revision_stream_id(project_id, family, contract_id))
    if last is None or last["new_revision_id"] != current or last["old_revision_id"] is None:
        raise NothingToRollBackError(contract=f"{family}/{contract_id}", current=current)
    return current, last["old_revision_id"]
