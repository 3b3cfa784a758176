"""The worker runtime's background loops (R-13, R-14), registered in ``awooop.loops.registry``.

- ``run-reaper`` (platform, every ``AWOOOP_REAPER_INTERVAL_S``): runs whose lease expired go
  back to PENDING (``RunRequeued``, dispatched again by the relay) while attempts remain, else
  FAIL with ``Max retry attempts exceeded`` (E-RUN-004), naming the expired attempt's worker;
  its dead letter is recorded with the failure (R-19). A run whose worker held other runs too
  is requeued as a suspect, uncharged, to run alone (:mod:`awooop.runs.leases.suspects`).
  WAITING_APPROVAL is never touched.
- ``approval-expiry`` (platform, every ``AWOOOP_APPROVAL_RESOLVER_INTERVAL_S``): runs whose
  approval expired (at the request's own ``expires_in``, else the worker's
  AWOOOP_APPROVAL_TTL_S) FAIL with E-APPROVAL-002, or resume when the request said
  ``on_expire="return"`` (the handler gets the expiry); their tokens are marked expired.

Both work in batches of ``BATCH`` rows, one transaction each, ``FOR UPDATE SKIP LOCKED``: any
number of copies may run at once (in ``awooop loops run`` and in ``awooop worker
--with-loops``) without doing anything twice. Each worker process also runs its own
``worker-reclaim`` loop (see :mod:`awooop.worker.reclaim`): it needs the worker's consumer.
"""

from __future__ import annotations

from awooop.core import metrics
from awooop.core.db import Database
from awooop.core.events import RunRequeued
from awooop.core.logs import get_logger
from awooop.core.loops import LoopCategory, LoopContext, LoopSpec
from awooop.eventlog.state import RunStatus
from awooop.runs import approvals, leases
from awooop.services import Services

log = get_logger(__name__)

BATCH = 500
MAX_BATCHES_PER_ITERATION = 100


async def reap_once(db: Database, batch: int = BATCH) -> tuple[int, int]:
    """One reaper pass; returns (requeued, failed)."""
    requeued = failed = 0
    for _ in range(MAX_BATCHES_PER_ITERATION):
        done = await db.in_platform_writes(lambda conn: leases.reap(conn, batch))
        for state, event in done:
            if isinstance(event, RunRequeued):
                requeued += 1
                metrics.REAPED.labels("suspected" if event.suspect else "requeued").inc()
                log.info(
                    "run_suspected" if event.suspect else "run_requeued",
                    run_id=str(state.run_id),
                    attempt=event.attempt,
                    expired_worker_id=event.worker_id,
                )
            else:
                failed += 1
                metrics.REAPED.labels("failed").inc()
                metrics.RUNS_FINISHED.labels("FAILED").inc()
                log.warning(
                    "run_failed_max_attempts",
                    run_id=str(state.run_id),
                    attempts=state.attempt_count,
                    expired_worker_id=event.worker_id,
                    reason=event.reason,
                )
        if len(done) < batch:
            break
    return requeued, failed


async def expire_approvals_once(db: Database, batch: int = BATCH) -> int:
    """One approval-expiry pass; returns the number of runs whose approval expired (failed,
    or resumed when the request said "return")."""
    total = 0
    for _ in range(MAX_BATCHES_PER_ITERATION):
        expired = await db.in_platform_writes(lambda conn: approvals.expire_due(conn, batch))
        for state in expired:
            if state.status is RunStatus.FAILED:  # else resumed: the request said "return"
                metrics.RUNS_FINISHED.labels("FAILED").inc()
            log.info(
                "approval_expired",
                run_id=str(state.run_id),
                project_id=state.project_id,
                status=state.status.value,
            )
        total += len(expired)
        if len(expired) < batch:
            break
    return total


def loops(services: Services) -> list[LoopSpec]:
    settings = services.settings

    async def reaper(_ctx: LoopContext) -> None:
        await reap_once(services.db)

    async def approval_expiry(_ctx: LoopContext) -> None:
        await expire_approvals_once(services.db)

    return [
        LoopSpec(
            name="run-reaper",
            category=LoopCategory.PLATFORM,
            interval_s=settings.reaper_interval_s,
            body=reaper,
            description="requeue or fail runs whose lease expired (R-13)",
        ),
        LoopSpec(
            name="approval-expiry",
            category=LoopCategory.PLATFORM,
            interval_s=settings.approval_resolver_interval_s,
            body=approval_expiry,
            description="fail runs whose approval token expired, E-APPROVAL-002 (R-14)",
        ),
    ]
