"""The ingest write (R-01, R-03, R-04): dedupe row, run and first event, all or nothing.

Everything here runs on the caller's connection, which carries the tenant: a tenant
transaction (``Database.tenant``, or a producer's own transaction after ``set_tenant``), or
a connection of :class:`awooop.core.sessions.TenantSessions` outside a transaction. Per
delivery:

1. :func:`load_config` (cached briefly, see :mod:`awooop.ingest.cache`): one statement
   reads the channel's secret, dedupe TTL and options
   (:class:`awooop.ingest.common.ChannelOptions`), the stored hash of the presented bearer
   token, the active ``agent`` contract's ``max_attempts`` and the concurrency limit of the
   contract or channel (:mod:`awooop.runs.concurrency`): each new run gets its key and the
   key's maximum from it, and a key with its depth cap of runs queued refuses the submission
   before anything is written (:mod:`awooop.ingest.depth`, 429 E-CONCURRENCY-001).
2. :func:`ingest`: ONE statement (``awooop/eventlog/sql/ingest_new.sql``, run by
   :func:`awooop.eventlog.ingest.insert_new`: the log room holds every statement that writes the
   log), atomic on its own:

   - checks the transaction first: its tenant setting must be the project and the login's
     binding must allow it, else it writes nothing and :func:`ingest` raises
     :class:`ProducerTransactionError` (E-INGEST-001) or :class:`TenantNotGrantedError`
     (E-INGEST-003), the transaction still usable. It does so on every call, so that a cached
     configuration never stands in for it;
   - claims each key's dedupe rows ``ON CONFLICT DO NOTHING``, in the current dedupe window
     and the next (the table is partitioned by window: migrations/0112_partitioned_dedupe.sql),
     unless a row of the key that has not expired sits in an older window (keys sorted and
     windows ascending, so concurrent batches lock in one order and cannot deadlock);
   - for exactly the keys that claimed both windows (its ``RETURNING``), inserts the run rows
     (PENDING), their streams at version 1 and the ``RunCreated`` events. Rows and events
     are built in Python beforehand by the same ``log.state.apply`` and
     ``events.encode_event`` every other write uses; SQL only picks the ones whose key was
     new and stamps the database clock: ``now()`` becomes the event's ``at``, the run's
     ``created_at``/``updated_at`` and the dedupe rows' ``created_at`` (one value per
     transaction).
     ``tests/integration/test_ingest_store.py`` checks that each row equals the replay of
     its event;
   - returns, besides the new keys, the existing rows of the other keys as the statement's
     snapshot sees them, with whether each is past ``expires_at``.

3. A key that conflicted but was not in that snapshot was committed by a concurrent
   delivery while ours waited (READ COMMITTED: a conflicting insert that has not committed
   makes ours wait for it; when it commits ours does nothing, when it rolls back ours
   inserts). A separate lookup, a new statement with a new snapshot, sees it: every
   concurrent caller gets the one run_id. A key that claimed only one of its two windows
   (a delivery whose clock was in the other window won it) deletes its half claim first. A
   row past ``expires_at`` that the expiry loop
   has not deleted yet counts as absent (R-04: after the TTL a repeat is new): it is deleted
   and the key goes round again.

So a first arrival or a repeat costs one statement, a lost race two or three. Round trips
are what ingest spends its time on (docs/ingest.md), hence one statement instead of three.
The event log row is the outbox entry that the relay follows; its metadata carries the W3C
``traceparent``/``tracestate`` of the current span.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import msgspec

from awooop.core.config import Settings
from awooop.core.db import Connection
from awooop.core.errors import DedupeRaceError, check_transaction_tenant
from awooop.core.events import RunCreated
from awooop.core.ids import new_run_id
from awooop.core.querier import Querier
from awooop.core.telemetry import inject
from awooop.eventlog import ingest as log_ingest
from awooop.eventlog.ingest import CLOCK_PLACEHOLDER
from awooop.ingest.common import ChannelOptions, ParsedEvent, StoredCredential
from awooop.ingest.depth import check_depth
from awooop.runs.concurrency_rules import Limit, RunKey, run_key

_json_decode = msgspec.json.Decoder().decode
DEFAULT_CONTRACT = "default"  # the agent contract of a run whose delivery names none
MAX_ROUNDS = 4  # insert / look up / drop expired; more rounds than races can need
MAX_CONTRACT_ATTEMPTS = 100

# --- SQL -------------------------------------------------------------------------------------

# Both configuration reads join the concurrency limit of the contract ($3), else of the channel
# ($2), of project $1 (migration 0132): its columns are NULL when there is none.
LIMIT_OF_SCOPE = """
LEFT JOIN LATERAL (
    SELECT l.scope || ':' || l.scope_key AS limit_scope, l.key_expr, l.max_expr,
           l.global_max, l.depth_cap
    FROM awooop_concurrency_limits l
    WHERE l.project_id = $1
      AND ((l.scope = 'contract' AND l.scope_key = $3)
           OR (l.scope = 'channel' AND l.scope_key = $2))
    ORDER BY l.scope DESC
    LIMIT 1
) AS lim ON true
"""

LOAD_CONFIG = (
    """
SELECT c.secret,
       c.dedupe_ttl_s,
       c.gitea_key,
       c.max_event_age_s,
       c.max_redelivery_age_s,
       (SELECT t.token_hash FROM awooop_api_tokens t
         WHERE t.token_id = $4 AND t.project_id = $1 AND t.channel_type = $2
           AND t.scope = 'ingest' AND t.revoked_at IS NULL) AS token_hash,
       (SELECT (r.body -> 'max_attempts')::text
          FROM awooop_active_revisions a
          JOIN awooop_contract_revisions r ON r.revision_id = a.active_revision_id
         WHERE a.project_id = $1 AND a.contract_family = 'agent'
           AND a.contract_id = $3) AS contract_max_attempts,
       lim.*
FROM (SELECT 1) AS one
LEFT JOIN awooop_channels c ON c.project_id = $1 AND c.channel_type = $2
"""  # noqa: S608 - constant text
    + LIMIT_OF_SCOPE
)

# The producer library's read (awooop.producer): no credentials (a producer role may read neither
# the channel's secret nor token hashes: migration 0090).
LOAD_PRODUCER_CONFIG = (
    """
SELECT (SELECT c.dedupe_ttl_s FROM awooop_channels c
         WHERE c.project_id = $1 AND c.channel_type = $2) AS dedupe_ttl_s,
       (SELECT (r.body -> 'max_attempts')::text
          FROM awooop_active_revisions a
          JOIN awooop_contract_revisions r ON r.revision_id = a.active_revision_id
         WHERE a.project_id = $1 AND a.contract_family = 'agent'
           AND a.contract_id = $3) AS contract_max_attempts,
       lim.*
FROM (SELECT 1) AS one
"""  # noqa: S608 - constant text
    + LIMIT_OF_SCOPE
)

# An expired key's rows in the windows a new claim needs (the current and the next one): rows in
# older windows no longer decide anything once expired, and go with their partition.
DELETE_EXPIRED_KEYS = """
DELETE FROM awooop_channel_event_dedupe d
USING unnest($3::text[]) AS k(provider_event_id)
WHERE d.project_id = $1 AND d.channel_type = $2 AND d.provider_event_id = k.provider_event_id
  AND d.window_start >= awooop_dedupe_window(now())
  AND d.window_start <= awooop_dedupe_window(now()) + interval '7 days'
  AND d.expires_at <= now()
"""

# This transaction's half claims (ingest_new.sql's ``orphan`` rows): the key lost a race in its
# other window. Deleted by the run id this transaction chose, so no one else's row goes.
DELETE_HALF_CLAIMS = """
DELETE FROM awooop_channel_event_dedupe d
USING unnest($3::text[], $4::uuid[]) AS k(provider_event_id, run_id)
WHERE d.project_id = $1 AND d.channel_type = $2 AND d.provider_event_id = k.provider_event_id
  AND d.run_id = k.run_id
  AND d.window_start >= awooop_dedupe_window(now())
  AND d.window_start <= awooop_dedupe_window(now()) + interval '7 days'
"""

# --- API -------------------------------------------------------------------------------------


class ChannelConfig(msgspec.Struct, frozen=True, kw_only=True):
    credential: StoredCredential
    dedupe_ttl_s: float
    max_attempts: int
    options: ChannelOptions = msgspec.field(default_factory=ChannelOptions)
    limit: Limit | None = None  # the contract's or channel's concurrency limit


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
        credential=StoredCredential(secret=row["secret"], token_hash=row["token_hash"]),
        dedupe_ttl_s=float(row["dedupe_ttl_s"] or settings.dedupe_ttl_s),
        max_attempts=contract_max_attempts(row["contract_max_attempts"], settings.max_attempts),
        options=channel_options(row),
        limit=concurrency_limit(row),
    )


async def load_producer_config(
    conn: Querier,
    settings: Settings,
    project_id: str,
    channel_type: str,
    contract_id: str = DEFAULT_CONTRACT,
) -> ChannelConfig:
    """:func:`load_config` without credentials (a producer login may read none)."""
    row = await conn.fetchrow(LOAD_PRODUCER_CONFIG, project_id, channel_type, contract_id)
    assert row is not None  # no FROM: always one row
    return ChannelConfig(
        credential=StoredCredential(secret=None, token_hash=None),
        dedupe_ttl_s=float(row["dedupe_ttl_s"] or settings.dedupe_ttl_s),
        max_attempts=contract_max_attempts(row["contract_max_attempts"], settings.max_attempts),
        limit=concurrency_limit(row),
    )


def concurrency_limit(row: Any) -> Limit | None:
    """The concurrency limit the configuration row carries, if any."""
    if row["limit_scope"] is None:
        return None
    return Limit(
        row["limit_scope"], row["key_expr"], row["max_expr"], row["global_max"], row["depth_cap"]
    )


def channel_options(row: Any) -> ChannelOptions:
    """The channel's options: each column NULL (or no row) is ChannelOptions' default."""
    given = {k: row[k] for k in ("gitea_key", "max_event_age_s", "max_redelivery_age_s")}
    return ChannelOptions(**{k: v for k, v in given.items() if v is not None})


def contract_max_attempts(text: str | None, default: int) -> int:
    """The contract's ``max_attempts`` (its JSON text, read as text so that no JSON codec of
    the connection is needed) when it is a sane integer, else the setting."""
    value: Any = _json_decode(text) if text is not None else None
    if isinstance(value, bool) or not isinstance(value, int):
        return default
    return value if 1 <= value <= MAX_CONTRACT_ATTEMPTS else default


def trace_metadata(source: str) -> dict[str, Any]:
    """Event metadata: where the event came from and the current span's trace context."""
    traceparent, tracestate = inject()
    return {"source": source, "traceparent": traceparent, "tracestate": tracestate}


async def ingest(
    conn: Querier,
    project_id: str,
    channel_type: str,
    events: Sequence[ParsedEvent],
    *,
    config: ChannelConfig,
    contract_id: str = DEFAULT_CONTRACT,
    metadata: Sequence[dict[str, Any]] | dict[str, Any] | None = None,
    parent: tuple[uuid.UUID, bool] | None = None,
) -> list[Outcome]:
    """Dedupe ``events`` and create a run for each first arrival; one Outcome per event, in
    order (a key repeated within ``events`` is created once and then a duplicate).
    ``metadata`` is the ``RunCreated`` events' metadata: one dict for all, or one per event
    (the HTTP server writes concurrent deliveries, each with its own trace, in one call).
    ``parent``: child runs (awooop.worker.child_runs): the parent's run id and whether
    cancelling it cancels them."""
    per_event = [metadata or {}] * len(events) if not isinstance(metadata, Sequence) else metadata
    if len(per_event) != len(events):
        raise ValueError("metadata: one dict per event, or one for all")
    first: dict[str, ParsedEvent] = {}
    first_metadata: dict[str, dict[str, Any]] = {}
    for event, event_metadata in zip(events, per_event, strict=True):
        if event.provider_event_id not in first:
            first[event.provider_event_id] = event
            first_metadata[event.provider_event_id] = event_metadata
    run_keys: dict[str, RunKey] = {}
    if config.limit is not None:
        limit = config.limit
        run_keys = {k: run_key(limit, project_id, channel_type, e.input) for k, e in first.items()}
        await check_depth(conn, project_id, limit, list(run_keys.values()))
    created: dict[str, uuid.UUID] = {}
    existing: dict[str, uuid.UUID] = {}
    pending = sorted(first)  # one lock order for every transaction
    for _ in range(MAX_ROUNDS):
        if not pending:
            break
        runs = [
            RunCreated(
                at=CLOCK_PLACEHOLDER,
                run_id=new_run_id(),
                project_id=project_id,
                channel_type=channel_type,
                provider_event_id=key,
                input=first[key].input,
                max_attempts=config.max_attempts,
                contract_id=contract_id,
                concurrency_scope=run_keys[key].scope if key in run_keys else None,
                concurrency_key=run_keys[key].key if key in run_keys else None,
                concurrency_max=run_keys[key].max if key in run_keys else None,
                parent_run_id=None if parent is None else parent[0],
                cancel_with_parent=parent is not None and parent[1],
            )
            for key in pending
        ]
        guard, rows = await log_ingest.insert_new(
            conn,
            project_id,
            channel_type,
            runs,
            config.dedupe_ttl_s,
            [first_metadata[k] for k in pending],
        )
        check_transaction_tenant(project_id, guard.tenant, guard.bound)
        halves = {r["provider_event_id"]: r["run_id"] for r in rows if r["orphan"]}
        if halves:  # lost a race in one window: drop the half claim before looking again
            keys = sorted(halves)
            await conn.execute(
                DELETE_HALF_CLAIMS, project_id, channel_type, keys, [halves[k] for k in keys]
            )
        expired = _sort_rows([r for r in rows if not r["orphan"]], created, existing)
        unseen = [k for k in pending if k not in created and k not in existing and k not in expired]
        if unseen:  # committed by a concurrent delivery after this statement's snapshot
            lookup = await log_ingest.look_up(
                conn, project_id, channel_type, unseen, config.dedupe_ttl_s
            )
            expired |= _sort_rows(lookup, created, existing)
        if expired:
            await conn.execute(DELETE_EXPIRED_KEYS, project_id, channel_type, sorted(expired))
        # Expired keys, and keys whose row vanished meanwhile (its partition was dropped, or
        # the expiry of a concurrent delivery deleted it), go round again.
        pending = sorted(k for k in pending if k not in created and k not in existing)
    if pending:
        raise DedupeRaceError(isolation=guard.isolation, keys=len(pending))

    outcomes: list[Outcome] = []
    seen: set[str] = set()
    for event in events:
        key = event.provider_event_id
        if key in created:
            outcomes.append(Outcome(key, created[key], key not in seen))
        else:
            outcomes.append(Outcome(key, existing[key], False))
        seen.add(key)
    return outcomes


def _sort_rows(
    rows: Sequence[Any], created: dict[str, uuid.UUID], existing: dict[str, uuid.UUID]
) -> set[str]:
    """File each row under created or existing; return the keys found expired."""
    expired: set[str] = set()
    for row in rows:
        key = row["provider_event_id"]
        if row.get("created"):
            created[key] = row["run_id"]
        elif key in created:
            continue  # the snapshot's old row of a key this statement re-created
        elif row["expired"]:
            expired.add(key)
        else:
            existing[key] = row["run_id"]
    return expired
