"""The facts behind ``blocked_on`` (:mod:`awooop.runs.blocked`): Postgres, one look at Redis.

- :data:`FACTS` reads every fact Postgres holds about a set of runs in one statement: the run
  state row (lease, heartbeat, attempts, failure, the step its worker last reported), the
  open approval row (who was asked, its
  reason) and the run's last "an attempt ended" event (requeue, lease release, failure,
  approval decision) from the event log. Each lateral join is one probe of an index
  (``awooop_approvals_run_idx``, the log's ``(stream_id, version)`` key, walked backwards over
  a run's few events), so the cost follows the number of runs asked about, not the tables.
  The run's stream name is computed in a subquery of its own (``run_stream``, kept apart by
  ``OFFSET 0``) and the log is probed with ``stream_id = run_stream.stream_id``: under the
  tenant role (row-level security) Postgres applies the policy's qual before any condition
  that is not leakproof, and ``'run-' || run_id::text`` (``textcat``, ``uuid_out``) is not,
  so written inline it made every probe a sequential scan of the log's partitions (20 runs:
  1,000 ms and 106,000 buffers among 100,000 runs as ``awooop_app``, 1 ms and 241 buffers
  either way with the subquery; ``tests/integration/test_tenant_read_plans.py``).
- :func:`shard_facts` asks Redis, once per shard, which consumers of the ``workers`` group
  read the shard's work stream within the window (``XINFO CONSUMERS``: a live worker reads
  every second while it has a free slot and touches its pending entries at every heartbeat,
  so ``AWOOOP_LEASE_TTL_S`` is a safe window), and :data:`LIVE_WORKERS` counts the worker
  processes alive by their own heartbeats in ``awooop_processes``. Either says the shard is
  read: on Redis 7.0 an idle worker's reads that return nothing do not reset its idle time.
- the flow-control wait of a RUNNING or WAITING_TOOL run's attempt (``awooop_llm_waits``, by
  its primary key): ``blocked_on`` then says ``rate_limited`` or ``over_budget`` (a model
  call), the key and until when, or ``over_concurrency_limit`` (its tool call answered and it
  waits for a slot of its key to continue: :mod:`awooop.worker.tool_waits`).
- a keyed PENDING, RESUMED or WAITING_TOOL run's key, its maximum and how many of the key's
  runs hold a slot (RUNNING with a live lease; one probe of
  ``awooop_run_state_concurrency_idx``): ``blocked_on`` then says ``over_concurrency_limit``
  when the key is full.
- the widest active pause that holds a PENDING or RESUMED run (``awooop_flow_pauses``, one
  probe of its active index by project): ``blocked_on`` then says ``paused``.
- :func:`with_routes` marks whether a live worker serves each PENDING or RESUMED run's
  contract in its project (``awooop_contract_served``, migration 0137: once per distinct pair):
  ``blocked_on`` then says ``no_worker_for_contract`` when none does.
- :func:`with_versions` marks the PENDING and RESUMED runs whose contract requires handler
  versions (``awooop_handler_versions``, migration 0140; once per distinct pair, as the role
  sees it) with those versions and the ones the live workers that serve it run
  (``awooop_worker_versions``): ``blocked_on`` then says ``no_worker_for_version`` when none
  of those is accepted.
- :func:`with_dead_letters` marks the PENDING and RESUMED runs that have an open dead letter
  (:func:`awooop.eventlog.deadletters.open_of_runs`: one probe of
  ``awooop_dead_letters_open_run_idx`` per such run).
- :func:`count_by_reason` is the gauge's sample: the live runs through :data:`LIVE_FACTS`
  (the partial indexes on live states), FAILED runs counted per failure code through the
  partial index of migration 0110 and classified with :func:`awooop.runs.blocked.failed_reason`.

A Redis that does not answer leaves ``known`` False: PENDING runs are then called
``pending_workers_busy`` or ``retry_pending`` from Postgres facts alone, never unread on a
guess.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec
from redis.exceptions import ResponseError

from awooop.core.db import Connection
from awooop.core.events import run_stream_sql
from awooop.core.logs import get_logger
from awooop.eventlog import deadletters, queries
from awooop.eventlog.state import RunStatus
from awooop.runs import versions
from awooop.runs.blocked import BlockedOn, Reason, RunFacts, ShardFacts, decide, failed_reason
from awooop.runs.blocked_waits import WaitFacts
from awooop.runs.pause_rules import Scope
from awooop.streams.keys import WORKER_GROUP, Keys

log = get_logger(__name__)

LIVE = ("PENDING", "RESUMED", "RUNNING", "WAITING_TOOL", "WAITING_APPROVAL", "WAITING_EVENT")
# Worker processes alive by their heartbeats (migration 0121): a count, for every role.
LIVE_WORKERS = "SELECT awooop_live_workers()"
# Whether a live worker serves each (project, contract) pair (migration 0137), for every role.
SERVED = """
SELECT u.project_id, u.contract_id, awooop_contract_served(u.project_id, u.contract_id) AS served
FROM unnest($1::text[], $2::text[]) AS u(project_id, contract_id)
"""
WAITING = (RunStatus.PENDING, RunStatus.RESUMED)

# --- SQL -------------------------------------------------------------------------------------
# The rules of a run's lease and of a concurrency slot (its worker's session too: migration 0161),
# as the claims apply them.
LEASE_UNTIL = queries.fragment("run_lease_until")
HEARTBEAT_AT = queries.fragment("run_heartbeat_at")
HOLDS_SLOT = queries.fragment("holds_slot")
# One statement for all the Postgres facts of the runs in $1 (or of every live run).
_SELECT = f"""
SELECT rs.run_id, rs.project_id, rs.status, rs.attempt_count, rs.max_attempts, rs.worker_id,
       lease.until AS lease_until, lease.beat AS heartbeat_at, rs.waiting_for,
       rs.approval_expires_at,
       rs.failure_reason, rs.failure_code, rs.updated_at, now() AS now, rs.suspect_worker_id,
       rs.current_step, rs.current_step_started_at, rs.current_step_attempt, rs.contract_id,
       ap.name AS approval_name, ap.reason AS approval_reason,
       ended.event_type AS last_end_type, ended.data ->> 'reason' AS last_end_reason,
       pz.scope AS paused_scope, pz.scope_key AS paused_key, pz.paused_by,
       pz.reason AS paused_reason,
       rs.concurrency_key, rs.concurrency_max, ck.executing AS concurrency_executing,
       gm.global_max AS concurrency_global_max, gm.executing AS concurrency_scope_executing,
       fw.reason AS flow_reason, fw.wait_key AS flow_key, fw.detail AS flow_detail,
       fw.until AS flow_until, wt.kind AS wait_kind, wt.name AS wait_name,
       wt.due_at AS wait_due_at, wt.needed AS wait_needed, wc.total AS wait_children,
       wc.finished AS wait_finished
FROM awooop_run_state rs
CROSS JOIN LATERAL (SELECT {run_stream_sql("rs.run_id")} AS stream_id OFFSET 0) run_stream
CROSS JOIN LATERAL (  -- the lease and heartbeat as the rule sees them: the run's or its session's
    SELECT {LEASE_UNTIL} AS until, {HEARTBEAT_AT} AS beat
    FROM (SELECT rs.lease_until, rs.heartbeat_at, rs.worker_id) AS r
) lease
LEFT JOIN LATERAL (
    SELECT a.name, a.reason FROM awooop_approvals a
    WHERE a.run_id = rs.run_id AND a.used_at IS NULL
    ORDER BY a.requested_at DESC LIMIT 1
) ap ON rs.status = 'WAITING_APPROVAL'
LEFT JOIN LATERAL (
    SELECT e.event_type, e.data FROM awooop_events e
    WHERE rs.status IN ('PENDING', 'RESUMED') AND rs.attempt_count > 0
      AND e.stream_id = run_stream.stream_id
      AND e.event_type IN ('RunRequeued', 'LeaseReleased', 'RunFailed',
                           'ApprovalRejected', 'ApprovalExpired')
    ORDER BY e.version DESC LIMIT 1
) ended ON true
LEFT JOIN LATERAL (
    SELECT p.scope, p.scope_key, p.paused_by, p.reason FROM awooop_flow_pauses p
    WHERE rs.status IN ('PENDING', 'RESUMED')
      AND p.project_id = rs.project_id AND p.resumed_at IS NULL
      AND (p.scope = 'project'
           OR (p.scope = 'channel' AND p.scope_key = rs.channel_type)
           OR (p.scope = 'contract' AND p.scope_key = rs.contract_id))
    ORDER BY array_position(ARRAY['project', 'channel', 'contract'], p.scope), p.paused_at
    LIMIT 1
) pz ON true
LEFT JOIN LATERAL (
    SELECT count(*)::int AS executing FROM awooop_run_state
    WHERE rs.status IN ('PENDING', 'RESUMED', 'WAITING_TOOL') AND rs.concurrency_key IS NOT NULL
      AND project_id = rs.project_id AND concurrency_key = rs.concurrency_key
      AND {HOLDS_SLOT}
) ck ON rs.concurrency_key IS NOT NULL
LEFT JOIN LATERAL (
    -- the global maximum of its limit's scope, if any, and the scope's runs holding slots
    SELECT l.global_max,
           (SELECT count(*)::int FROM awooop_run_state
            WHERE project_id = rs.project_id AND concurrency_key IS NOT NULL
              AND concurrency_scope = rs.concurrency_scope
              AND {HOLDS_SLOT}) AS executing
    FROM awooop_concurrency_limits l
    WHERE rs.status IN ('PENDING', 'RESUMED', 'WAITING_TOOL') AND rs.concurrency_key IS NOT NULL
      AND l.project_id = rs.project_id AND l.global_max IS NOT NULL
      AND l.scope || ':' || l.scope_key = rs.concurrency_scope
) gm ON true
LEFT JOIN awooop_llm_waits fw
    ON fw.run_id = rs.run_id AND rs.status IN ('RUNNING', 'WAITING_TOOL')
   AND fw.attempt = rs.attempt_count
   AND fw.ended_at IS NULL
LEFT JOIN awooop_run_waits wt ON wt.run_id = rs.run_id AND rs.status = 'WAITING_EVENT'
LEFT JOIN LATERAL (
    -- a wait for child runs (migration 0145): how many it waits for, how many have finished
    SELECT jsonb_array_length(wt.children) AS total,
           (SELECT count(*)::int FROM awooop_run_state c
            WHERE c.run_id IN (SELECT jsonb_array_elements_text(wt.children)::uuid)
              AND c.parent_run_id = rs.run_id
              AND c.status IN ('COMPLETED', 'FAILED', 'CANCELLED')) AS finished
    WHERE wt.kind = 'children'
) wc ON true
"""  # noqa: S608 - constant identifiers
FACTS = _SELECT + "WHERE rs.run_id = ANY($1::uuid[])"
# Four arms, each with the predicate of one partial index of awooop_run_state (0003), the
# last through the open waits (one row per WAITING_EVENT run, migration 0141).
LIVE_FACTS = (
    _SELECT  # noqa: S608 - constant text
    + "WHERE rs.status IN ('PENDING', 'RESUMED') UNION ALL "
    + _SELECT
    + "WHERE rs.status IN ('RUNNING', 'WAITING_TOOL') UNION ALL "
    + _SELECT
    + "WHERE rs.status = 'WAITING_APPROVAL' UNION ALL "
    + _SELECT
    + "WHERE rs.run_id IN (SELECT run_id FROM awooop_run_waits) AND rs.status = 'WAITING_EVENT'"
)
# awooop_run_state_failed_idx (migration 0110): an index-only count per project and code.
FAILED_COUNTS = """
SELECT project_id, failure_code, count(*) AS runs FROM awooop_run_state
WHERE status = 'FAILED' GROUP BY project_id, failure_code
"""
# ---------------------------------------------------------------------------------------------


def facts_of(row: Any) -> RunFacts:
    return RunFacts(
        run_id=row["run_id"],
        project_id=row["project_id"],
        status=RunStatus(row["status"]),
        attempt_count=row["attempt_count"],
        max_attempts=row["max_attempts"],
        worker_id=row["worker_id"],
        lease_until=row["lease_until"],
        heartbeat_at=row["heartbeat_at"],
        waiting_for=row["waiting_for"],
        approval_expires_at=row["approval_expires_at"],
        failure_reason=row["failure_reason"],
        failure_code=row["failure_code"],
        updated_at=row["updated_at"],
        now=row["now"],
        approval_name=row["approval_name"],
        approval_reason=row["approval_reason"],
        last_end_type=row["last_end_type"],
        last_end_reason=row["last_end_reason"] or None,
        suspect_worker_id=row["suspect_worker_id"],
        paused_scope=None if row["paused_scope"] is None else Scope(row["paused_scope"]),
        paused_key=row["paused_key"] or "",
        paused_by=row["paused_by"],
        concurrency_key=row["concurrency_key"],
        concurrency_max=row["concurrency_max"],
        concurrency_executing=row["concurrency_executing"],
        concurrency_global_max=row["concurrency_global_max"],
        concurrency_scope_executing=row["concurrency_scope_executing"],
        paused_reason=row["paused_reason"] or "",
        current_step=row["current_step"],
        current_step_started_at=row["current_step_started_at"],
        current_step_attempt=row["current_step_attempt"],
        flow_reason=row["flow_reason"],
        flow_key=row["flow_key"] or "",
        flow_detail=row["flow_detail"] or "",
        flow_until=row["flow_until"],
        contract_id=row["contract_id"],
        wait=None if row["wait_kind"] is None else wait_facts(row),
    )


def wait_facts(row: Any) -> WaitFacts:
    return WaitFacts(
        kind=row["wait_kind"],
        name=row["wait_name"],
        due_at=row["wait_due_at"],
        needed=row["wait_needed"],
        children=row["wait_children"] or 0,
        finished=row["wait_finished"] or 0,
    )


async def with_dead_letters(conn: Connection, facts: Sequence[RunFacts]) -> list[RunFacts]:
    """``facts`` with ``dead_lettered`` set for the PENDING/RESUMED runs that have an open
    dead letter (only those can be ``pending_dead_lettered``; a FAILED run's code says it)."""
    waiting = [f.run_id for f in facts if f.status in (RunStatus.PENDING, RunStatus.RESUMED)]
    dead = {d.run_id for d in await deadletters.open_of_runs(conn, waiting)}
    return [
        msgspec.structs.replace(f, dead_lettered=True) if f.run_id in dead else f for f in facts
    ]


async def with_routes(conn: Connection, facts: Sequence[RunFacts]) -> list[RunFacts]:
    """``facts`` with ``served`` set for the PENDING/RESUMED runs: whether a live worker serves
    the run's contract in its project (one call per distinct pair; None: no worker is live)."""
    pairs = sorted({(f.project_id, f.contract_id or "") for f in facts if f.status in WAITING})
    if not pairs:
        return list(facts)
    rows = await conn.fetch(SERVED, [p for p, _ in pairs], [c or None for _, c in pairs])
    served = {(r["project_id"], r["contract_id"] or ""): r["served"] for r in rows}
    return [
        msgspec.structs.replace(f, served=served[(f.project_id, f.contract_id or "")])
        if f.status in WAITING
        else f
        for f in facts
    ]


async def with_versions(conn: Connection, facts: Sequence[RunFacts]) -> list[RunFacts]:
    """``facts`` with ``versions`` set for the PENDING/RESUMED runs whose contract requires
    handler versions (:func:`awooop.runs.versions.waits`: once per distinct pair)."""
    pairs = {(f.project_id, f.contract_id) for f in facts if f.status in WAITING and f.contract_id}
    found = await versions.waits(conn, ((p, c) for p, c in pairs if c is not None))
    return [
        msgspec.structs.replace(f, versions=found[(f.project_id, f.contract_id)])
        if f.status in WAITING and f.contract_id and (f.project_id, f.contract_id) in found
        else f
        for f in facts
    ]


async def gathered(conn: Connection, rows: Sequence[Any]) -> list[RunFacts]:
    """The facts of ``rows`` (of :data:`FACTS` or :data:`LIVE_FACTS`) with what other tables
    say: open dead letters, the workers' routes and the handler versions contracts require."""
    facts = await with_dead_letters(conn, [facts_of(r) for r in rows])
    return await with_versions(conn, await with_routes(conn, facts))


async def run_facts(conn: Connection, run_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, RunFacts]:
    facts = await gathered(conn, await conn.fetch(FACTS, list(run_ids)))
    return {f.run_id: f for f in facts}


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def shard_facts(
    redis: Any, keys: Keys, shard: int, window_s: float, workers: int = 0
) -> ShardFacts:
    """What Redis says about ``shard`` (see the module docstring), with the ``workers`` alive;
    unknown when Redis fails."""
    try:
        try:
            consumers = await redis.xinfo_consumers(keys.work_stream(shard), WORKER_GROUP)
        except ResponseError as exc:
            if "no such key" not in str(exc).lower() and "nogroup" not in str(exc).lower():
                raise
            consumers = []  # no stream or no group yet: nobody has read it
        readers = sum(1 for c in consumers if int(c["idle"]) <= window_s * 1000)
    except Exception as exc:  # Redis down or confused: say unknown rather than guess
        log.info("blocked_on_shard_unknown", shard=shard, error=repr(exc)[:200])
        return ShardFacts(shard=shard, known=False, workers=workers)
    return ShardFacts(shard=shard, known=True, readers=readers, workers=workers)


async def shards_facts(
    conn: Connection, redis: Any, keys: Keys, projects: Iterable[str], window_s: float
) -> dict[str, ShardFacts]:
    """ShardFacts per project (each shard asked once)."""
    by_shard: dict[int, ShardFacts] = {}
    out: dict[str, ShardFacts] = {}
    wanted = set(projects)
    workers = int(await conn.fetchval(LIVE_WORKERS)) if wanted else 0
    for project in wanted:
        shard = keys.shard_of(project)
        if shard not in by_shard:
            by_shard[shard] = await shard_facts(redis, keys, shard, window_s, workers)
        out[project] = by_shard[shard]
    return out


async def blocked_on(
    conn: Connection, redis: Any, keys: Keys, run_ids: Sequence[uuid.UUID], window_s: float
) -> dict[uuid.UUID, BlockedOn | None]:
    """``blocked_on`` of each run in ``run_ids`` that ``conn`` can see."""
    facts = await run_facts(conn, run_ids)
    shards = await shards_facts(conn, redis, keys, (f.project_id for f in facts.values()), window_s)
    return {run_id: decide(f, shards[f.project_id]) for run_id, f in facts.items()}


async def count_by_reason(
    conn: Connection, redis: Any, keys: Keys, window_s: float
) -> dict[tuple[str, str], int]:
    """Runs per (project_id, reason): every live run, and FAILED runs (the gauge's sample)."""
    live = await gathered(conn, await conn.fetch(LIVE_FACTS))
    failed = await conn.fetch(FAILED_COUNTS)
    projects = {f.project_id for f in live} | {row["project_id"] for row in failed}
    shards = await shards_facts(conn, redis, keys, projects, window_s)
    counts: Counter[tuple[str, str]] = Counter()
    for project in projects:
        for reason in Reason:  # every reason of a project present, 0 when none
            counts[(project, reason.value)] += 0
    for f in live:
        decided = decide(f, shards[f.project_id])
        if decided is not None:
            counts[(f.project_id, decided.reason.value)] += 1
    for row in failed:
        counts[(row["project_id"], failed_reason(row["failure_code"]).value)] += row["runs"]
    return dict(counts)
