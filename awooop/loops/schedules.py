"""The ``schedules`` loop (platform, every ``AWOOOP_SCHEDULES_INTERVAL_S``): fires every
project's schedules when they are due (:mod:`awooop.schedules.fire`).

An iteration reads the due schedules in batches of :data:`BATCH`, in due order across
projects (each project's earliest first, so that one project's thousands of schedules due at
once do not hold back another's), and fires each in a tenant transaction of its project, with
the project and a trace of its own bound for that fire: the fire's span is the root of the
trace its runs carry (like a webhook's ingest span). At most :data:`MAX_BATCHES` batches per
iteration; the next iteration goes on. Any number of copies may run at once (``awooop loops
run`` on several hosts, ``awooop up``): the row lock, the compare-and-swap on the fire time and
intake's dedupe make each fire time start one run however they race.

The loop reads the time from its clock (``now``, the wall clock by default), never from the
database: a test runs several copies on one simulated clock (``schedule_loop(services,
now=clock)``) and moves it across a daylight saving change or an outage. A schedule whose
fire fails (its data, not the database) fails alone: it is logged and counted, and the loop
goes on with the others; a lost or refused database connection fails the iteration, which the
loop framework retries.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial

from opentelemetry import context as otel_context
from opentelemetry import trace

from awooop.core import metrics
from awooop.core.config import Settings
from awooop.core.context import bound, new_trace_id
from awooop.core.db import Database
from awooop.core.logs import get_logger
from awooop.core.loops import LoopCategory, LoopContext, LoopSpec
from awooop.core.retries import CONNECTION_ERRORS
from awooop.core.telemetry import tracer
from awooop.schedules import fire, rules
from awooop.services import Services

LOOP_NAME = "schedules"
BATCH = 100
MAX_BATCHES = 20

Clock = Callable[[], datetime]

log = get_logger(__name__)


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Report:
    """What one iteration did: schedules fired, runs started, fire times whose run existed
    already (duplicates), fires another transaction won, fires that failed."""

    fired: int = 0
    started: int = 0
    duplicates: int = 0
    lost: int = 0
    failed: int = 0


async def fire_due(
    db: Database,
    settings: Settings,
    now: Clock = utc_now,
    *,
    batch: int = BATCH,
    max_batches: int = MAX_BATCHES,
) -> Report:
    """One pass: fire the schedules due by ``now()``, batch after batch, until a batch is not
    full, or none of a batch was this replica's to fire (other replicas hold them), or
    ``max_batches`` were done."""
    report = Report()
    for _ in range(max_batches):
        moment = now()
        candidates = await db.in_platform(partial(fire.due, now=moment, batch=batch))
        before = report.fired + report.failed
        for candidate in candidates:
            await _fire_one(db, settings, candidate, moment, report)
        if len(candidates) < batch or report.fired + report.failed == before:
            break
    return report


async def _fire_one(
    db: Database, settings: Settings, candidate: fire.Candidate, now: datetime, report: Report
) -> None:
    project_id = candidate.project_id
    with tracer.start_as_current_span(
        "schedule fire",
        context=otel_context.Context(),  # a trace of its own: the one its runs carry
        attributes={
            "awooop.project_id": project_id,
            "awooop.schedule_id": str(candidate.schedule_id),
        },
    ) as span:
        context = span.get_span_context()
        trace_id = format(context.trace_id, "032x") if context.is_valid else new_trace_id()
        with bound(project_id=project_id, trace_id=trace_id):
            try:
                fired = await db.in_tenant(
                    project_id, lambda conn: fire.fire(conn, settings, candidate, now)
                )
            except fire.LostRace:
                report.lost += 1
                log.info("schedule_fire_lost", schedule_id=str(candidate.schedule_id))
                return
            except CONNECTION_ERRORS:
                raise
            except Exception as exc:
                report.failed += 1
                span.record_exception(exc)
                span.set_status(trace.StatusCode.ERROR)
                metrics.SCHEDULE_FIRES.labels("failed").inc()
                log.exception("schedule_fire_failed", schedule_id=str(candidate.schedule_id))
                return
            if fired is None:
                return
            report.fired += 1
            _count(fired, candidate, now, report)


def _count(fired: fire.Fired, candidate: fire.Candidate, now: datetime, report: Report) -> None:
    metrics.SCHEDULE_LAG.observe(max(0.0, (now - candidate.due_at).total_seconds()))
    if fired.passed:
        metrics.SCHEDULE_FIRES.labels(fire.MISSED).inc(fired.passed)
    for start in fired.starts:
        metrics.SCHEDULE_FIRES.labels(start.outcome.partition(":")[0]).inc()
        report.started += start.outcome == fire.STARTED
        report.duplicates += start.outcome == fire.DUPLICATE
    log.info(
        "schedule_fired",
        schedule_id=str(fired.schedule_id),
        fire_times=[rules.key_time(s.fire_time) for s in fired.starts],
        outcomes=[s.outcome for s in fired.starts],
        run_ids=[str(s.run_id) for s in fired.starts if s.run_id is not None],
        missed=fired.passed,
        next_fire_at=rules.key_time(fired.next_fire_at),
    )


def schedule_loop(services: Services, now: Clock = utc_now) -> LoopSpec:
    """The ``schedules`` loop on ``services``, reading the time from ``now``."""
    settings = services.settings

    async def body(_ctx: LoopContext) -> None:
        await fire_due(services.db, settings, now)

    return LoopSpec(
        name=LOOP_NAME,
        category=LoopCategory.PLATFORM,
        interval_s=settings.schedules_interval_s,
        body=body,
        description="fire due schedules: one run per fire time through intake, catch-up, "
        "overlap and jitter per schedule",
    )


def loops(services: Services) -> list[LoopSpec]:
    return [schedule_loop(services)]
