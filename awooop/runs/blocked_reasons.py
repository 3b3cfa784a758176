"""The reasons of ``blocked_on`` (:mod:`awooop.runs.blocked` decides which one a run has), the
statuses each can come from, and the facts about who reads a shard's work stream."""

from __future__ import annotations

import enum

import msgspec

from awooop.eventlog.state import DISPATCHABLE, RunStatus


class Reason(enum.StrEnum):
    PENDING_NO_WORKER = "pending_no_worker"
    NO_WORKER_FOR_CONTRACT = "no_worker_for_contract"
    NO_WORKER_FOR_VERSION = "no_worker_for_version"
    PENDING_WORKERS_BUSY = "pending_workers_busy"
    PENDING_DEAD_LETTERED = "pending_dead_lettered"
    PENDING_ISOLATION = "pending_isolation"
    PAUSED = "paused"
    OVER_CONCURRENCY_LIMIT = "over_concurrency_limit"
    RETRY_PENDING = "retry_pending"
    RUNNING = "running"
    RATE_LIMITED = "rate_limited"
    OVER_BUDGET = "over_budget"
    LEASE_EXPIRED = "lease_expired"
    WAITING_TOOL = "waiting_tool"
    WAITING_APPROVAL = "waiting_approval"
    APPROVAL_EXPIRED = "approval_expired"
    SLEEPING = "sleeping"
    WAITING_FOR_EVENT = "waiting_for_event"
    WAITING_FOR_CHILDREN = "waiting_for_children"
    FAILED = "failed"
    FAILED_DEAD_LETTERED = "failed_dead_lettered"


# The statuses each reason can come from: a console filter on a reason narrows the SQL by these.
REASON_STATUSES: dict[Reason, frozenset[RunStatus]] = {
    Reason.PENDING_NO_WORKER: frozenset({RunStatus.PENDING, RunStatus.RESUMED}),
    Reason.NO_WORKER_FOR_CONTRACT: frozenset({RunStatus.PENDING, RunStatus.RESUMED}),
    Reason.NO_WORKER_FOR_VERSION: frozenset({RunStatus.PENDING, RunStatus.RESUMED}),
    Reason.PENDING_WORKERS_BUSY: frozenset({RunStatus.PENDING, RunStatus.RESUMED}),
    Reason.PENDING_DEAD_LETTERED: frozenset({RunStatus.PENDING, RunStatus.RESUMED}),
    Reason.PENDING_ISOLATION: frozenset({RunStatus.PENDING, RunStatus.RESUMED}),
    Reason.PAUSED: frozenset({RunStatus.PENDING, RunStatus.RESUMED}),
    Reason.OVER_CONCURRENCY_LIMIT: frozenset({*DISPATCHABLE, RunStatus.WAITING_TOOL}),
    Reason.RETRY_PENDING: frozenset({RunStatus.PENDING, RunStatus.RESUMED}),
    Reason.RUNNING: frozenset({RunStatus.RUNNING}),
    Reason.RATE_LIMITED: frozenset({RunStatus.RUNNING}),
    Reason.OVER_BUDGET: frozenset({RunStatus.RUNNING}),
    Reason.LEASE_EXPIRED: frozenset({RunStatus.RUNNING, RunStatus.WAITING_TOOL}),
    Reason.WAITING_TOOL: frozenset({RunStatus.WAITING_TOOL}),
    Reason.WAITING_APPROVAL: frozenset({RunStatus.WAITING_APPROVAL}),
    Reason.APPROVAL_EXPIRED: frozenset({RunStatus.WAITING_APPROVAL}),
    Reason.SLEEPING: frozenset({RunStatus.WAITING_EVENT}),
    Reason.WAITING_FOR_EVENT: frozenset({RunStatus.WAITING_EVENT}),
    Reason.WAITING_FOR_CHILDREN: frozenset({RunStatus.WAITING_EVENT}),
    Reason.FAILED: frozenset({RunStatus.FAILED}),
    Reason.FAILED_DEAD_LETTERED: frozenset({RunStatus.FAILED}),
}


class ShardFacts(msgspec.Struct, frozen=True, kw_only=True):
    """Who reads a shard's work stream. ``known`` False: Redis did not answer (no PENDING run
    is then called unread on a guess). ``workers``: worker processes alive by their heartbeats
    (``awooop_live_workers()``), each reading every shard: the truth where ``XINFO CONSUMERS``
    is not (on Redis 7.0 empty reads do not reset an idle consumer's idle time)."""

    shard: int
    known: bool
    readers: int = 0  # consumers of the workers group that read within the window
    workers: int = 0

    @property
    def unread(self) -> bool:
        return self.known and self.readers == 0 and self.workers == 0

    @property
    def reading(self) -> int:
        return max(self.readers, self.workers)
