"""Platform loops that sample gauges nobody increments in line (R-51).

- ``stats_runs``: live runs by project and state (``awooop_runs``), the age of the oldest live
  run per project and state (``awooop_runs_oldest_age_seconds``), and runs a platform loop
  should already have handled (``awooop_runs_overdue``: RUNNING/WAITING_TOOL whose lease expired
  more than two reaper intervals + 30 s ago; WAITING_APPROVAL whose approval expired more than
  two resolver intervals + 30 s ago; WAITING_EVENT whose wait was due more than two timers poll
  intervals + 30 s ago, ``timer_due``), and ``awooop_timers_overdue_seconds``: how long past due
  the earliest open wait is (one probe of ``awooop_run_waits_due_idx``). Only live states are
  sampled: each of the three queries walks one of the partial indexes of ``awooop_run_state``,
  so the cost follows the number of live runs, not the table's size. Finished runs are counted
  as they finish by ``awooop_runs_finished_total``. The same loop samples
  ``awooop_runs_blocked``: live runs and FAILED runs by project and ``blocked_on`` reason,
  decided by the one function the CLI and the console use
  (:func:`awooop.runs.blocked_facts.count_by_reason`: live runs through the partial indexes,
  FAILED runs an index-only count per failure code). It also samples
  ``awooop_dead_letters_open``: open dead letters per project from ``awooop_dead_letters`` (its
  partial index on open rows; ``__platform__`` always present, 0 when none), and
  ``awooop_paused_scopes``: active pauses per scope (``awooop_flow_pauses``), and
  ``awooop_concurrency_key_runs``: runs executing and waiting of the ``TOP_KEYS`` keys with the
  most runs waiting (:func:`awooop.runs.concurrency.usage`, through the keyed runs' index).
  ``awooop_llm_budget_tokens``: the current period's tokens used, reserved and allowed by the
  project-wide model-call budgets, for the 20 projects that use the most (bounded labels).
- ``stats_outbox``: ``awooop_outbox_backlog_seconds`` for both outboxes, read from Postgres
  (0 when everything is delivered): ``events``, the age of the first event after the relay's
  saved cursor (``awooop_relay_cursor``, saved at least every poll interval while the relay
  runs; one index probe of ``awooop_events (tx_id, position)``), and ``contract``, the age of
  the oldest undelivered row of ``awooop_contract_outbox`` (its partial index on undelivered
  rows). The relay's own ``awooop_outbox_lag_seconds`` stops moving when the relay stops or
  hangs; this measure does not depend on the relay, so the outbox alerts use it.
- ``stats_streams``: for every work and events stream of every shard, each consumer group's
  ``lag`` (entries not yet delivered to the group) and ``pending`` (delivered, not yet
  acknowledged) from ``XINFO GROUPS``.

Each sample replaces the previous one: label sets that disappeared (a project with no live run
left, a group that no longer exists) are removed, so no series goes stale with an old value.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from prometheus_client import Gauge
from redis.exceptions import ResponseError

from awooop.core import metrics
from awooop.core.context import PLATFORM_PROJECT
from awooop.core.loops import LoopCategory, LoopContext, LoopSpec
from awooop.eventlog import deadletters, queries
from awooop.eventlog.state import RunStatus
from awooop.runs import concurrency
from awooop.runs.blocked_facts import count_by_reason
from awooop.runs.concurrency import KeyUsage
from awooop.runs.pause_rules import Scope
from awooop.services import Services

LIVE_STATES: tuple[str, ...] = (
    RunStatus.PENDING,
    RunStatus.RESUMED,
    RunStatus.RUNNING,
    RunStatus.WAITING_TOOL,
    RunStatus.WAITING_APPROVAL,
    RunStatus.WAITING_EVENT,
)

OVERDUE_REASONS = ("lease_expired", "approval_expired", "timer_due")  # SAMPLE_RUNS' columns
TOP_KEYS = 20  # the concurrency key gauge's keys: bounded label cardinality

# --- SQL ----------------------------------------------------------------------------------------
# The active pauses (awooop_flow_pauses' partial unique index), per scope.
PAUSED_SCOPES = """
SELECT scope, count(*) AS pauses FROM awooop_flow_pauses
WHERE resumed_at IS NULL GROUP BY scope
"""
# The project-wide model-call token budgets in force and their current period, the most used
# first (awooop_llm_budgets' active index; one counter row each): awooop_llm_budget_tokens.
BUDGET_TOP = 20
LLM_BUDGETS = """
SELECT b.project_id, b.tokens AS budget, coalesce(u.used, 0) AS used,
       coalesce(u.reserved, 0) AS reserved
FROM awooop_llm_budgets b
LEFT JOIN awooop_llm_budget_usage u
    ON u.project_id = b.project_id AND u.model = b.model AND u.unit = b.unit
   AND u.period_s = b.period_s
   AND u.period_start = date_bin(make_interval(secs => b.period_s), now(),
                                 timestamptz '2000-01-01 00:00:00+00')
WHERE b.valid_to IS NULL AND b.model = '' AND b.unit = 'tokens'
ORDER BY coalesce(u.used, 0) + coalesce(u.reserved, 0) DESC, b.project_id
LIMIT $1
"""
# A lease runs out with its own lease_until or its worker's session (migration 0161).
LEASE = queries.fragment("run_lease_until")
# Four branches: three with exactly the predicate of one partial index of awooop_run_state
# (migrations/0003; the leased runs' is 0158's), the fourth through the open waits
# (awooop_run_waits, one row per WAITING_EVENT run), so each walks live runs only.
SAMPLE_RUNS = f"""
SELECT project_id, status, count(*) AS runs,
       extract(epoch FROM now() - min(updated_at))::float8 AS oldest_age_s,
       count(*) FILTER (WHERE {LEASE} < now() - make_interval(secs => $1)) AS lease_expired,
       0::bigint AS approval_expired, 0::bigint AS timer_due
FROM awooop_run_state AS r WHERE status IN ('RUNNING', 'WAITING_TOOL')
GROUP BY project_id, status
UNION ALL
SELECT project_id, status, count(*),
       extract(epoch FROM now() - min(updated_at))::float8, 0::bigint, 0::bigint, 0::bigint
FROM awooop_run_state WHERE status IN ('PENDING', 'RESUMED')
GROUP BY project_id, status
UNION ALL
SELECT project_id, status, count(*),
       extract(epoch FROM now() - min(updated_at))::float8, 0::bigint,
       count(*) FILTER (WHERE approval_expires_at < now() - make_interval(secs => $2)),
       0::bigint
FROM awooop_run_state WHERE status = 'WAITING_APPROVAL'
GROUP BY project_id, status
UNION ALL
SELECT r.project_id, r.status, count(*),
       extract(epoch FROM now() - min(r.updated_at))::float8, 0::bigint, 0::bigint,
       count(*) FILTER (WHERE w.due_at < now() - make_interval(secs => $3))
FROM awooop_run_waits w JOIN awooop_run_state r USING (run_id)
WHERE r.status = 'WAITING_EVENT'
GROUP BY r.project_id, r.status
"""  # noqa: S608 - constant text: the lease rule is written once
# How long past due the earliest open wait is (0: none is): one probe of awooop_run_waits_due_idx.
TIMERS_OVERDUE = """
SELECT greatest(0, coalesce(extract(epoch FROM now() - min(due_at)), 0))::float8
FROM awooop_run_waits WHERE due_at IS NOT NULL
"""
CONTRACT_OUTBOX_LAG = """
SELECT COALESCE(extract(epoch FROM now() - min(created_at))::float8, 0)
FROM awooop_contract_outbox WHERE delivered_at IS NULL
"""
# The first event in the relay's order after its saved cursor (the oldest it has not
# published, give or take the events of one transaction): one probe of awooop_events_follow_idx.
EVENTS_OUTBOX_LAG = """
SELECT COALESCE(extract(epoch FROM now() - (
    SELECT e.recorded_at FROM awooop_events e
    WHERE (e.tx_id, e.position) > (c.tx_id::text::xid8, c.position)
    ORDER BY e.tx_id, e.position LIMIT 1))::float8, 0)
FROM awooop_relay_cursor c WHERE c.name = 'events'
"""
# -----------------------------------------------------------------------------------------------


class GaugeSnapshot:
    """Sets a gauge to a complete sample, removing label sets the previous sample had."""

    def __init__(self, gauge: Gauge) -> None:
        self.gauge = gauge
        self._labels: set[tuple[str, ...]] = set()

    def publish(self, values: dict[tuple[str, ...], float]) -> None:
        for labels, value in values.items():
            self.gauge.labels(*labels).set(value)
        for labels in self._labels - values.keys():
            self.gauge.remove(*labels)
        self._labels = set(values)


def runs_sample(
    rows: Iterable[Sequence[Any]],
) -> tuple[
    dict[tuple[str, ...], float], dict[tuple[str, ...], float], dict[tuple[str, ...], float]
]:
    """Pure: (runs by project/state, oldest age by project/state, overdue by project/reason)
    from rows (project_id, status, runs, oldest_age_s, lease_expired, approval_expired,
    timer_due). Every live state of a project that has any live run is present (0 when it has
    none), and so is every overdue reason."""
    by_state: dict[tuple[str, ...], float] = {}
    oldest: dict[tuple[str, ...], float] = {}
    overdue: dict[tuple[str, ...], float] = {}
    for project_id, status, runs, oldest_age_s, *late in rows:
        for state in LIVE_STATES:
            by_state.setdefault((project_id, state), 0.0)
        by_state[(project_id, status)] = float(runs)
        oldest[(project_id, status)] = max(0.0, float(oldest_age_s))
        for reason, n in zip(OVERDUE_REASONS, late, strict=True):
            overdue[(project_id, reason)] = overdue.get((project_id, reason), 0.0) + float(n)
    return by_state, oldest, overdue


def keys_sample(usage: Iterable[KeyUsage]) -> dict[tuple[str, ...], float]:
    """Pure: the concurrency key gauge's label sets (project, key, executing|waiting)."""
    out: dict[tuple[str, ...], float] = {}
    for u in usage:
        out[(u.project_id, u.key, "executing")] = float(u.executing)
        out[(u.project_id, u.key, "waiting")] = float(u.waiting)
    return out


class StatsLoops:
    """The state (published label sets) behind the three stats loops of one process."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self._runs = GaugeSnapshot(metrics.RUNS_BY_STATE)
        self._oldest = GaugeSnapshot(metrics.RUNS_OLDEST_AGE)
        self._overdue = GaugeSnapshot(metrics.RUNS_OVERDUE)
        self._blocked = GaugeSnapshot(metrics.RUNS_BLOCKED)
        self._lag = GaugeSnapshot(metrics.CONSUMER_LAG)
        self._pending = GaugeSnapshot(metrics.CONSUMER_PENDING)
        self._dead = GaugeSnapshot(metrics.DEAD_LETTERS_OPEN)
        self._keys = GaugeSnapshot(metrics.CONCURRENCY_KEY_RUNS)
        self._budgets = GaugeSnapshot(metrics.LLM_BUDGET_USAGE)

    async def sample_runs(self, _ctx: LoopContext) -> None:
        settings = self.services.settings
        lease_grace = 2 * settings.reaper_interval_s + 30
        approval_grace = 2 * settings.approval_resolver_interval_s + 30
        timer_grace = 2 * settings.timer_poll_interval_s + 30
        async with self.services.db.platform() as conn:
            rows = await conn.fetch(SAMPLE_RUNS, lease_grace, approval_grace, timer_grace)
            timers_overdue = await conn.fetchval(TIMERS_OVERDUE)
            blocked = await count_by_reason(
                conn, self.services.redis, self.services.keys, settings.lease_ttl_s
            )
            dead = await deadletters.open_counts(conn)
            paused = await conn.fetch(PAUSED_SCOPES)
            busiest = await concurrency.usage(conn, None, TOP_KEYS)
            budgets = await conn.fetch(LLM_BUDGETS, BUDGET_TOP)
        by_state, oldest, overdue = runs_sample(tuple(row.values()) for row in rows)
        self._runs.publish(by_state)
        self._oldest.publish(oldest)
        self._overdue.publish(overdue)
        metrics.owned(metrics.TIMERS_OVERDUE).set(float(timers_overdue))
        self._blocked.publish({labels: float(n) for labels, n in blocked.items()})
        self._dead.publish(dead_letters_sample(dead))
        self._keys.publish(keys_sample(busiest))
        self._budgets.publish(
            {
                (row["project_id"], state): float(row[column])
                for row in budgets
                for state, column in (
                    ("used", "used"),
                    ("reserved", "reserved"),
                    ("limit", "budget"),
                )
            }
        )
        by_scope = {row["scope"]: row["pauses"] for row in paused}
        for scope in Scope:  # three label sets, 0 when none
            metrics.PAUSED_SCOPES.labels(scope.value).set(by_scope.get(scope.value, 0))

    async def sample_outbox(self, _ctx: LoopContext) -> None:
        async with self.services.db.platform() as conn:
            events = await conn.fetchval(EVENTS_OUTBOX_LAG)
            contract = await conn.fetchval(CONTRACT_OUTBOX_LAG)
        metrics.OUTBOX_BACKLOG.labels("events").set(max(0.0, float(events or 0.0)))
        metrics.OUTBOX_BACKLOG.labels("contract").set(max(0.0, float(contract)))

    async def sample_streams(self, _ctx: LoopContext) -> None:
        keys, redis = self.services.keys, self.services.redis
        lag: dict[tuple[str, ...], float] = {}
        pending: dict[tuple[str, ...], float] = {}
        for shard in keys.shards():
            for stream in (keys.work_stream(shard), keys.events_stream(shard)):
                try:
                    groups = await redis.xinfo_groups(stream)
                except ResponseError as exc:
                    if "no such key" in str(exc).lower():
                        continue  # not created yet (or lost: the streams module rebuilds it)
                    raise
                for group in groups:
                    name = _text(group["name"])
                    pending[(stream, name)] = float(group["pending"])
                    if group.get("lag") is not None:  # nil when Redis cannot tell (trimmed)
                        lag[(stream, name)] = float(group["lag"])
        self._lag.publish(lag)
        self._pending.publish(pending)


def dead_letters_sample(open_by_project: dict[str, int]) -> dict[tuple[str, ...], float]:
    """Pure: the gauge's label sets; the platform project always, so the series never goes
    absent while the loop runs (StatsNotSampled watches it)."""
    sample: dict[tuple[str, ...], float] = {(PLATFORM_PROJECT,): 0.0}
    sample.update({(project,): float(n) for project, n in open_by_project.items()})
    return sample


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def loops(services: Services) -> list[LoopSpec]:
    stats = StatsLoops(services)
    interval = services.settings.stats_interval_s
    return [
        LoopSpec(
            name="stats_runs",
            category=LoopCategory.PLATFORM,
            interval_s=interval,
            body=stats.sample_runs,
            description="samples live runs by project and state, their age, overdue runs, "
            "open dead letters",
        ),
        LoopSpec(
            name="stats_outbox",
            category=LoopCategory.PLATFORM,
            interval_s=interval,
            body=stats.sample_outbox,
            description="samples the age of the oldest undelivered entry of each outbox",
        ),
        LoopSpec(
            name="stats_streams",
            category=LoopCategory.PLATFORM,
            interval_s=interval,
            body=stats.sample_streams,
            description="samples consumer-group lag and pending entries",
        ),
    ]
