"""How a worker takes leases: the statements of its claim paths and what their answers mean.

- an announced run (stream delivery, reclaim): claimed in a batch per project, one statement
  on the run pool (:func:`claim_announced`); a run found with an expired lease is taken alone
  in a tenant transaction (:func:`take_if_expired`);
- the polling path: expired leases, then dispatchable runs old enough, in one platform
  transaction (:func:`claim_polled`);
- a claim nobody will run (its requester was cancelled, the worker is stopping): the
  ``LeaseReleased`` write that hands it back (:func:`release`).

The worker (:mod:`awooop.worker.runtime`) decides when; this module only talks to Postgres.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from awooop.core import metrics
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.events import LeaseReleased, RunFailed, RunRequeued
from awooop.core.logs import get_logger
from awooop.eventlog.state import RunState
from awooop.runs import leases
from awooop.runs.leases import Availability
from awooop.runs.routing import ROUTE_CHANNEL, Routes, notice

log = get_logger("awooop.worker")


@dataclass(frozen=True)
class Claimed:
    """One run's share of a claim batch: the claimed state, or why it was not claimable."""

    state: RunState | None
    seen: Availability | None


async def claim_announced(
    db: Database,
    settings: Settings,
    worker_id: str,
    items: list[tuple[uuid.UUID, dict[str, Any]]],
    routes: Routes,
) -> list[Claimed | BaseException]:
    """Claim a batch of one project's announced runs; one answer per item, in order. A run
    this worker does not serve (``routes``), or whose contract requires another handler
    version (:mod:`awooop.runs.versions`), is answered UNSERVED, and the workers that serve it
    are rung (:data:`awooop.runs.routing.ROUTE_CHANNEL`) to take it from Postgres."""
    run_ids = [run_id for run_id, _meta in items]
    metas: list[dict[str, Any] | None] = [meta for _run_id, meta in items]
    statements = leases.RunStatements(db)
    # One statement on the run pool (platform role, like the polling path): no tenant to
    # set and no BEGIN/COMMIT, the claim is one round trip. Batches stay per project.
    batch = await statements.claim_many(
        run_ids,
        worker_id,
        settings.claim_ttl_s,
        metas,
        fair=settings.fair_share,
        served=routes.params,
    )
    results: list[Claimed | BaseException] = []
    unserved: set[str] = set()
    for run_id in run_ids:
        state = batch.claimed.get(run_id)
        other = batch.others.get(run_id)
        if state is not None:
            results.append(Claimed(state, None))
        elif other is not None and run_id in batch.unserved:
            results.append(Claimed(None, Availability.UNSERVED))
            unserved.add(notice(other.project_id, other.contract_id, run_id))
        elif run_id in batch.deferred:
            results.append(Claimed(None, Availability.DEFERRED))
        elif run_id in batch.paused:
            results.append(Claimed(None, Availability.PAUSED))
        else:
            seen = leases.availability(batch.others.get(run_id), batch.now, worker_id)
            results.append(Claimed(None, seen))
    if unserved:
        try:  # after the claims committed: a lost ring costs the serving workers one poll period
            await statements.notify(ROUTE_CHANNEL, sorted(unserved))
        except Exception as exc:
            log.warning("route_notice_failed", error=repr(exc))
    return results


async def take_if_expired(
    db: Database,
    settings: Settings,
    worker_id: str,
    run_id: uuid.UUID,
    project_id: str,
    seen: Availability,
    meta: dict[str, Any],
    routes: Routes,
) -> tuple[RunState | None, bool]:
    """The claim found nothing (``seen`` says why); take the run if its lease expired.
    Returns the claimed state, or None and whether the message is done with."""
    if seen is Availability.EXPIRED:
        # Platform role, like the polling path: whether the dead worker held other runs
        # (the reap decision) is a question across projects.
        taken = await db.in_platform_writes(
            lambda conn: leases.take_expired(
                conn, run_id, worker_id, settings.claim_ttl_s, meta, routes.params
            ),
            timeout_s=settings.lease_io_timeout_s,
        )
        if taken is None:
            return None, False  # someone else is on it right now
        count_reap(taken.reaped)
        if taken.claimed:
            return taken.state, True
        # failed (max attempts), a suspect left to the isolated claim, or paused
        return None, True
    # Finished, waiting for approval, unknown, or already mine: nothing to run here. A
    # suspect: the isolated claim finds it in Postgres (awooop.worker.isolation). Paused: the
    # resume wakes the polling path, which finds it in Postgres (awooop.runs.pauses).
    # Deferred: the worker rings its polling path, which takes runs in the fair order.
    # Unserved: the workers that serve it were rung, their polling path takes it.
    # Held by a live lease elsewhere, or locked by a concurrent claim: leave it pending.
    return None, seen not in (Availability.HELD, Availability.CLAIMABLE)


async def claim_polled(
    db: Database,
    settings: Settings,
    worker_id: str,
    free: int,
    min_age_s: float,
    meta: dict[str, Any],
    routes: Routes,
) -> list[RunState]:
    """Up to ``free`` runs for the polling path, of those the worker serves (``routes``):
    expired leases first, then dispatchable runs that waited at least ``min_age_s``."""
    ttl = settings.claim_ttl_s
    served = routes.params

    async def claim_batch(conn: Any) -> tuple[list[leases.Taken], list[RunState]]:
        taken = await leases.take_expired_batch(conn, worker_id, ttl, free, meta, served)
        room = free - sum(1 for t in taken if t.claimed)
        polled = await leases.poll(
            conn, worker_id, ttl, room, min_age_s, meta, fair=settings.fair_share, served=served
        )
        return taken, polled

    taken, polled = await db.in_platform_writes(claim_batch, timeout_s=settings.lease_io_timeout_s)
    for t in taken:
        count_reap(t.reaped)
    return [t.state for t in taken if t.claimed] + polled


# A delivery whose claim took nothing owes the polling path one start (resume_bell.owe) when its
# run was deferred by the fair order (acknowledged: polling must take it), or when its run was
# already taken here or finished: a polling turn took it ahead of its message, most often the
# turn of a deferred run, which has no message left; this message hands that turn on.
OWES_A_TURN = frozenset({Availability.DEFERRED, Availability.FINISHED, Availability.HELD_BY_ME})


def release(state: RunState, worker_id: str) -> leases.FencedWrite:
    """The fenced write that hands a claimed run's lease back (``LeaseReleased``)."""
    return leases.FencedWrite(
        state.run_id,
        worker_id,
        state.attempt_count,
        lambda _s, now: LeaseReleased(
            at=now,
            worker_id=worker_id,
            attempt=state.attempt_count,
            charged=False,
            reason="the worker stopped before the attempt started",
        ),
    )


def reap_outcome(event: RunRequeued | RunFailed) -> str:
    """The ``awooop_reaped_runs_total`` label of a reap event."""
    if isinstance(event, RunFailed):
        return "failed"
    return "suspected" if event.suspect else "requeued"


def count_reap(event: RunRequeued | RunFailed) -> None:
    metrics.REAPED.labels(reap_outcome(event)).inc()
