"""The ingest transaction (R-01, R-03, R-04): dedupe row, run and first event, all or nothing.

Everything here runs inside the caller's transaction, which carries the tenant (the HTTP
path opens ``Database.tenant(project)``, producers bring their own). Per delivery:

1. :func:`load_config`: one statement reads the database clock, the transaction's tenant
   and isolation level, the channel's secret and dedupe TTL, the stored hash of the
   presented bearer token and the active ``agent`` contract's ``max_attempts``.
2. :func:`ingest`: ``INSERT ... ON CONFLICT DO NOTHING RETURNING`` of the dedupe rows (keys
   sorted, so concurrent batches lock in one order and cannot deadlock). For each key that
   conflicted, look the existing row up. Under READ COMMITTED a conflicting insert of
   another transaction that has not committed yet makes our insert wait for it; once it
   commits the insert does nothing and the lookup (a new statement, a new snapshot) sees its
   row, so every concurrent caller gets the one run_id; if it rolls back, our insert
   proceeds. A row past its ``expires_at`` that the expiry loop has not deleted yet counts
   as absent (R-04: after the TTL a repeat is new): it is deleted and the key inserted again.
3. :func:`awooop.runs.store.create_runs` for the keys inserted: run rows (PENDING) and their
   ``RunCreated`` events, stamped with the database clock of the dedupe row. The event log
   row is the outbox entry that the relay follows; its metadata carries the W3C
   ``traceparent``/``tracestate`` of the current span.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import msgspec

from awooop.config import Settings
from awooop.db import Connection
from awooop.errors import DedupeRaceError
from awooop.events import RunCreated
from awooop.ingest.common import ParsedEvent, StoredCredential
from awooop.runs import store
from awooop.telemetry import inject

DEFAULT_CONTRACT = "default"
AGENT_FAMILY = "agent"
MAX_ROUNDS = 4  # insert / look up / drop expired; more rounds than races can need
MAX_CONTRACT_ATTEMPTS = 100

# --- SQL -------------------------------------------------------------------------------------

LOAD_CONFIG = """
SELECT now() AS db_now,
       current_setting('awooop.project_id', true) AS tenant,
       current_setting('transaction_isolation') AS isolation,
       c.secret,
       c.dedupe_ttl_s,
       (SELECT t.token_hash FROM awooop_api_tokens t
         WHERE t.token_id = $4 AND t.project_id = $1 AND t.channel_type = $2
           AND t.scope = 'ingest' AND t.revoked_at IS NULL) AS token_hash,
       (SELECT r.body -> 'max_attempts'
          FROM awooop_active_revisions a
          JOIN awooop_contract_revisions r ON r.revision_id = a.active_revision_id
         WHERE a.project_id = $1 AND a.contract_family = 'agent'
           AND a.contract_id = $3) AS contract_max_attempts
FROM (SELECT 1) AS one
LEFT JOIN awooop_channels c ON c.project_id = $1 AND c.channel_type = $2
"""

INSERT_DEDUPE = """
INSERT INTO awooop_channel_event_dedupe AS d
    (project_id, channel_type, provider_event_id, run_id, expires_at)
SELECT $1, $2, k.provider_event_id, k.run_id, now() + make_interval(secs => $5::float8)
FROM unnest($3::text[], $4::uuid[]) WITH ORDINALITY AS k(provider_event_id, run_id, ord)
ORDER BY k.ord
ON CONFLICT (project_id, channel_type, provider_event_id) DO NOTHING
RETURNING d.provider_event_id, d.run_id, d.created_at
"""

LOOKUP_DEDUPE = """
SELECT provider_event_id, run_id, expires_at <= now() AS expired
FROM awooop_channel_event_dedupe
WHERE project_id = $1 AND channel_type = $2 AND provider_event_id = ANY($3::text[])
"""

DELETE_EXPIRED_KEYS = """
DELETE FROM awooop_channel_event_dedupe
WHERE project_id = $1 AND channel_type = $2 AND provider_event_id = ANY($3::text[])
  AND expires_at <= now()
"""

# --- API -------------------------------------------------------------------------------------


class ChannelConfig(msgspec.Struct, frozen=True, kw_only=True):
    db_now: datetime
    tenant: str | None
    isolation: str
    credential: StoredCredential
    dedupe_ttl_s: float
    max_attempts: int


class Outcome(msgspec.Struct, frozen=True):
    """One event's result: its run and whether this delivery created it."""

    provider_event_id: str
    run_id: uuid.UUID
    created: bool


async def load_config(
    conn: Connection,
    settings: Settings,
    project_id: str,
    channel_type: str,
    contract_id: str = DEFAULT_CONTRACT,
    token_id: str | None = None,
) -> ChannelConfig:
    row = await conn.fetchrow(LOAD_CONFIG, project_id, channel_type, contract_id, token_id)
    assert row is not None  # FROM (SELECT 1): always one row
    return ChannelConfig(
        db_now=row["db_now"],
        tenant=row["tenant"] or None,
        isolation=row["isolation"],
        credential=StoredCredential(secret=row["secret"], token_hash=row["token_hash"]),
        dedupe_ttl_s=float(row["dedupe_ttl_s"] or settings.dedupe_ttl_s),
        max_attempts=contract_max_attempts(row["contract_max_attempts"], settings.max_attempts),
    )


def contract_max_attempts(value: Any, default: int) -> int:
    """The contract's ``max_attempts`` when it is a sane integer, else the setting."""
    valid = isinstance(value, int) and not isinstance(value, bool)
    return value if valid and 1 <= value <= MAX_CONTRACT_ATTEMPTS else default


def trace_metadata(source: str) -> dict[str, Any]:
    """Event metadata: where the event came from and the current span's trace context."""
    traceparent, tracestate = inject()
    return {"source": source, "traceparent": traceparent, "tracestate": tracestate}


async def ingest(
    conn: Connection,
    project_id: str,
    channel_type: str,
    events: Sequence[ParsedEvent],
    *,
    config: ChannelConfig,
    contract_id: str = DEFAULT_CONTRACT,
    metadata: dict[str, Any] | None = None,
) -> list[Outcome]:
    """Dedupe ``events`` and create a run for each first arrival; one Outcome per event, in
    order (a key repeated within ``events`` is created once and then a duplicate)."""
    first: dict[str, ParsedEvent] = {}
    for event in events:
        first.setdefault(event.provider_event_id, event)
    created_at: dict[str, tuple[uuid.UUID, datetime]] = {}
    existing: dict[str, uuid.UUID] = {}
    pending = sorted(first)  # one lock order for every transaction
    for _ in range(MAX_ROUNDS):
        if not pending:
            break
        rows = await conn.fetch(
            INSERT_DEDUPE,
            project_id,
            channel_type,
            pending,
            [uuid.uuid4() for _ in pending],
            config.dedupe_ttl_s,
        )
        for row in rows:
            created_at[row["provider_event_id"]] = (row["run_id"], row["created_at"])
        conflicted = [k for k in pending if k not in created_at]
        if not conflicted:
            pending = []
            break
        expired: list[str] = []
        for row in await conn.fetch(LOOKUP_DEDUPE, project_id, channel_type, conflicted):
            if row["expired"]:
                expired.append(row["provider_event_id"])
            else:
                existing[row["provider_event_id"]] = row["run_id"]
        if expired:
            await conn.execute(DELETE_EXPIRED_KEYS, project_id, channel_type, expired)
        # Expired keys, and keys whose row vanished between insert and lookup (the expiry
        # loop deleted it), go round again.
        pending = sorted(k for k in conflicted if k not in existing)
    if pending:
        raise DedupeRaceError(isolation=config.isolation, keys=len(pending))

    await store.create_runs(
        conn,
        [
            RunCreated(
                at=at,
                run_id=run_id,
                project_id=project_id,
                channel_type=channel_type,
                provider_event_id=key,
                input=first[key].input,
                max_attempts=config.max_attempts,
                contract_id=contract_id,
            )
            for key, (run_id, at) in created_at.items()
        ],
        metadata,
    )
    outcomes: list[Outcome] = []
    seen: set[str] = set()
    for event in events:
        key = event.provider_event_id
        if key in created_at:
            outcomes.append(Outcome(key, created_at[key][0], key not in seen))
        else:
            outcomes.append(Outcome(key, existing[key], False))
        seen.add(key)
    return outcomes
