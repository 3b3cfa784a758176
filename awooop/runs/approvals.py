"""Approvals (R-14): single-use tokens that approve or reject a run in WAITING_APPROVAL.

- A worker's attempt asks (:func:`request`): ``ApprovalRequested`` is written fenced (the
  attempt must hold the lease; the event releases it) together with a row in
  ``awooop_approvals`` holding the SHA-256 of a fresh random token. The token itself is
  returned once, to be handed to the approver, and never stored.
- :func:`decide` spends a token: in one transaction the row is locked, checked (unknown or
  for another run E-APPROVAL-001, expired E-APPROVAL-002, already used E-APPROVAL-003), marked
  used, and ``ApprovalGranted`` (RESUMED: the relay dispatches the run again) or
  ``ApprovalRejected`` (FAILED, E-APPROVAL-004) is applied to the run. Any refusal writes
  nothing.
- :func:`decide_as` decides without the token, for a management token or a console session of
  the project (``manage`` or ``admin``, checked by the caller): the run's latest request is
  locked and checked as a token's row is, and closed the same way, recording the token as
  ``actor`` and the person as ``by`` (``decided_by`` in the row). Both lock the same row, so of
  a token decision and a decision without it made at once exactly one wins; the other finds
  the row used (E-APPROVAL-003).
- :func:`expire_due` (the approval-timeout loop) fails runs whose approval expired with
  ``ApprovalExpired`` (FAILED, E-APPROVAL-002) and marks their open tokens expired.
- A request may carry a payload (the draft), its own expiry, and say "return" for a rejection
  or an expiry (:mod:`awooop.runs.approval_options`): such a decision resumes the run instead
  of failing it (``resumed`` in the event). A decision may carry a reason and an edited
  payload, in the event and the row, so the handler gets them.
- A resumed attempt finds the decision with :func:`find_decision` (by run and approval name),
  so a handler's ``wait_for_approval`` returns instead of asking again.
"""

from __future__ import annotations

import enum
import hashlib
import secrets
import uuid
from datetime import datetime, timedelta
from typing import Any

import msgspec

from awooop.core.config import STEP_RESULT_MAX_BYTES
from awooop.core.db import Connection
from awooop.core.errors import (
    ApprovalExpiredError,
    ApprovalTokenInvalidError,
    ApprovalTokenUsedError,
    InvalidInputError,
)
from awooop.core.events import ApprovalExpired, ApprovalGranted, ApprovalRejected, ApprovalRequested
from awooop.eventlog import run_reads
from awooop.eventlog.runs import apply_and_store
from awooop.eventlog.state import RunState, row_to_state
from awooop.runs import approval_options as options
from awooop.runs import run_rows
from awooop.runs.leases import fenced_record

# --- SQL -----------------------------------------------------------------------------------

INSERT = """
INSERT INTO awooop_approvals
    (approval_id, project_id, run_id, name, attempt, token_hash, reason, requested_at,
     expires_at, payload, on_reject, on_expire)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
"""

LOCK_BY_HASH = """
SELECT approval_id, project_id, run_id, name, attempt, expires_at, used_at, decision,
       on_reject, payload AS draft, now() AS db_now
FROM awooop_approvals WHERE token_hash = $1
FOR UPDATE
"""

LOCK_LATEST = """
SELECT approval_id, project_id, run_id, name, attempt, expires_at, used_at, decision,
       on_reject, payload AS draft, now() AS db_now
FROM awooop_approvals WHERE run_id = $1
ORDER BY requested_at DESC
LIMIT 1
FOR UPDATE
"""

MARK_USED = """
UPDATE awooop_approvals SET used_at = $2, decision = $3, actor = $4, decided_by = $5,
    decision_reason = $6, edited_payload = $7
WHERE approval_id = $1
"""

LATEST_DECISION = """
SELECT decision, actor, decided_by, used_at, decision_reason, edited_payload, on_reject,
       on_expire
FROM awooop_approvals
WHERE run_id = $1 AND name = $2
ORDER BY requested_at DESC
LIMIT 1
"""

EXPIRE_TOKENS = """
UPDATE awooop_approvals SET used_at = $2, decision = 'expired'
WHERE run_id = $1 AND used_at IS NULL
RETURNING on_expire
"""

# --- API -----------------------------------------------------------------------------------

TOKEN_BYTES = 32
# The prefix keeps tokens from starting with "-", which a command line would read as an option.
TOKEN_PREFIX = "apv_"  # noqa: S105 - a visible marker, not a secret
MAX_NAME_LENGTH = 200


class Decision(enum.StrEnum):
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"


class ApprovalTicket(msgspec.Struct, frozen=True, kw_only=True):
    """What the approver needs: handed to the handler's notifier once; holds the token."""

    approval_id: uuid.UUID
    run_id: uuid.UUID
    project_id: str
    name: str
    token: str
    reason: str
    expires_at: datetime
    payload: Any = None  # the draft to review


class DecisionRecord(msgspec.Struct, frozen=True, kw_only=True):
    decision: Decision
    actor: str | None
    decided_at: datetime
    by: str | None = None  # the person, for a decision without the token
    reason: str = ""
    payload: Any = None  # edited by the reviewer (None: not edited)
    resumed: bool = False  # a rejection or expiry the request asked to "return"


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_BYTES)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def check_name(name: str) -> str:
    if not 1 <= len(name) <= MAX_NAME_LENGTH:
        raise InvalidInputError(f"approval name must have 1 to {MAX_NAME_LENGTH} characters")
    return name


async def request(
    conn: Connection,
    run_id: uuid.UUID,
    worker_id: str,
    attempt: int,
    *,
    name: str,
    reason: str,
    ttl_s: float,
    metadata: dict[str, Any] | None = None,
    payload: Any = None,
    on_reject: str = options.FAIL,
    on_expire: str = options.FAIL,
    expires_in_s: float | None = None,
) -> ApprovalTicket:
    """Put the run in WAITING_APPROVAL (fenced) and create its single-use token; it expires
    after ``expires_in_s`` when given, else ``ttl_s``."""
    check_name(name)
    options.check_policy("on_reject", on_reject)
    options.check_policy("on_expire", on_expire)
    token = new_token()
    approval_id = uuid.uuid4()

    def make(_state: RunState, now: datetime) -> ApprovalRequested:
        return ApprovalRequested(
            at=now,
            worker_id=worker_id,
            attempt=attempt,
            expires_at=now + timedelta(seconds=expires_in_s or ttl_s),
            reason=reason,
            payload=payload,
            on_reject=on_reject,
            on_expire=on_expire,
            expires_in_s=expires_in_s,
        )

    state = await fenced_record(conn, run_id, worker_id, attempt, make, metadata)
    assert state.approval_expires_at is not None
    await conn.execute(
        INSERT,
        approval_id,
        state.project_id,
        run_id,
        name,
        attempt,
        hash_token(token),
        reason,
        state.updated_at,
        state.approval_expires_at,
        payload,
        on_reject,
        on_expire,
    )
    return ApprovalTicket(
        approval_id=approval_id,
        run_id=run_id,
        project_id=state.project_id,
        name=name,
        token=token,
        reason=reason,
        expires_at=state.approval_expires_at,
        payload=payload,
    )


async def decide(
    conn: Connection,
    run_id: uuid.UUID,
    token: str,
    decision: Decision,
    *,
    actor: str,
    reason: str = "",
    metadata: dict[str, Any] | None = None,
    payload: Any = None,
    payload_max_bytes: int = STEP_RESULT_MAX_BYTES,
) -> RunState:
    """Spend ``token`` on ``run_id``: approve or reject, with a reason and an edited payload
    (None: not edited). Refusals raise and write nothing."""
    answer = _Answer(reason, payload, payload_max_bytes)
    row = await conn.fetchrow(LOCK_BY_HASH, hash_token(token))
    if row is None or row["run_id"] != run_id:
        raise ApprovalTokenInvalidError(run_id=run_id)
    return await _close(conn, row, decision, actor, None, answer, metadata)


async def decide_as(
    conn: Connection,
    run_id: uuid.UUID,
    decision: Decision,
    *,
    actor: str,
    by: str,
    reason: str = "",
    metadata: dict[str, Any] | None = None,
    payload: Any = None,
    payload_max_bytes: int = STEP_RESULT_MAX_BYTES,
) -> RunState:
    """Approve or reject the run's open request without its token: ``actor`` is the
    management token (or console session's token) that may act on the project, ``by`` the
    person. Refusals raise (with the codes a token decision gets) and write nothing."""
    person = check_person(by)
    answer = _Answer(reason, payload, payload_max_bytes)
    row = await conn.fetchrow(LOCK_LATEST, run_id)
    if row is None:
        await run_rows.lock(conn, run_id)  # a run the tenant does not see: E-RUN-003 (404)
        raise ApprovalTokenInvalidError("no approval was asked of this run", run_id=run_id)
    return await _close(conn, row, decision, actor, person, answer, metadata)


def check_person(by: str) -> str:
    """Pure: the name of the person who decides (1 to :data:`MAX_NAME_LENGTH` characters)."""
    name = by.strip()
    if not 1 <= len(name) <= MAX_NAME_LENGTH:
        raise InvalidInputError(
            f"the name of who decides must have 1 to {MAX_NAME_LENGTH} characters"
        )
    return name


async def _close(
    conn: Connection,
    row: Any,
    decision: Decision,
    actor: str,
    by: str | None,
    answer: _Answer,
    metadata: dict[str, Any] | None,
) -> RunState:
    """Check the locked request ``row`` and decide it: the event, then the row marked used."""
    if decision is Decision.EXPIRED:
        raise ValueError("expiry is decided by the approval-timeout loop, not by a person")
    run_id: uuid.UUID = row["run_id"]
    now: datetime = row["db_now"]
    if row["decision"] == Decision.EXPIRED or (row["used_at"] is None and row["expires_at"] <= now):
        raise ApprovalExpiredError(run_id=run_id, expired_at=row["expires_at"])
    if row["used_at"] is not None:
        raise ApprovalTokenUsedError(run_id=run_id, used_at=row["used_at"])
    state, now = await run_rows.lock(conn, run_id)
    if state.attempt_count != row["attempt"]:
        raise ApprovalTokenInvalidError(
            "the approval token belongs to an earlier request of this run", run_id=run_id
        )
    reason = answer.reason
    payload = None if answer.payload == row["draft"] else answer.payload  # unchanged: no edit
    event: ApprovalGranted | ApprovalRejected = (
        ApprovalGranted(at=now, actor=actor, by=by, reason=reason, payload=payload)
        if decision is Decision.APPROVED
        else ApprovalRejected(
            at=now,
            actor=actor,
            reason=reason,
            by=by,
            payload=payload,
            resumed=row["on_reject"] == options.RETURN,
        )
    )
    new_state = await apply_and_store(conn, state, event, metadata)
    await conn.execute(
        MARK_USED, row["approval_id"], now, str(decision), actor, by, reason, payload
    )
    return new_state


async def find_decision(conn: Connection, run_id: uuid.UUID, name: str) -> DecisionRecord | None:
    """The decision on the latest request named ``name`` of the run (None: none or open)."""
    row = await conn.fetchrow(LATEST_DECISION, run_id, name)
    if row is None or row["decision"] is None:
        return None
    decision = Decision(row["decision"])
    policy = {Decision.REJECTED: row["on_reject"], Decision.EXPIRED: row["on_expire"]}
    return DecisionRecord(
        decision=decision,
        actor=row["actor"],
        decided_at=row["used_at"],
        by=row["decided_by"],
        reason=row["decision_reason"],
        payload=row["edited_payload"],
        resumed=policy.get(decision) == options.RETURN,
    )


async def expire_due(
    conn: Connection, limit: int, metadata: dict[str, Any] | None = None
) -> list[RunState]:
    """Fail up to ``limit`` runs whose approval expired (E-APPROVAL-002), or resume those whose
    request said "return"; platform role."""
    rows = await conn.fetch(run_reads.LOCK_APPROVAL_DUE, limit)
    expired = []
    for row in rows:
        state = row_to_state(row)
        now: datetime = row["db_now"]
        policies = [r["on_expire"] for r in await conn.fetch(EXPIRE_TOKENS, state.run_id, now)]
        event = ApprovalExpired(at=now, resumed=options.RETURN in policies)
        expired.append(await apply_and_store(conn, state, event, metadata))
    return expired


class _Answer:
    """A decision's reason and edited payload, checked (refusals raise before any read)."""

    def __init__(self, reason: str, payload: Any, max_bytes: int) -> None:
        self.reason = options.check_reason(reason)
        what = "the edited payload"
        self.payload = None if payload is None else options.check_payload(what, payload, max_bytes)
