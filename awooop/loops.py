"""The background loop framework (R-40, R-41, R-42).

A loop declares its name, category, interval and body (one iteration). :func:`run_loop`
runs iterations until ``stop`` is set; each iteration has ``project_id`` and a fresh
``trace_id`` in context variables and runs inside a span; success sets
``awooop_background_loop_last_run_timestamp{loop_name, project_id}``; an exception is logged
with context, counted in ``awooop_background_loop_errors_total``, and the loop goes on after
an exponential backoff (capped at 10 intervals or 60 s). A body may set ``ctx.wakeup`` (for
example from a LISTEN callback) to start the next iteration before the interval ends.
"""

from __future__ import annotations

import asyncio
import enum
import os
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from opentelemetry import trace

from awooop import metrics
from awooop.context import bound, new_trace_id
from awooop.logs import get_logger
from awooop.telemetry import tracer

log = get_logger(__name__)

PLATFORM_PROJECT = "__platform__"
DEFAULT_TENANT_PROJECT = "awoooi"
LEGACY_PROJECT_ENV = "LOOP_PROJECT_ID"
LEGACY_PROJECT_DEFAULT = "legacy_awoooi_default"


class LoopCategory(enum.StrEnum):
    PLATFORM = "platform"
    TENANT = "tenant"
    PER_TENANT = "per-tenant"
    LEGACY = "legacy"


@dataclass
class LoopContext:
    project_id: str
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    iteration: int = 0


LoopBody = Callable[[LoopContext], Awaitable[None]]


@dataclass(frozen=True)
class LoopSpec:
    name: str
    category: LoopCategory
    interval_s: float
    body: LoopBody
    project_id: str | None = None  # tenant: the fixed project; per-tenant: the instance's
    description: str = ""

    def resolved_project_id(self) -> str:
        if self.category is LoopCategory.PLATFORM:
            return PLATFORM_PROJECT
        if self.category is LoopCategory.LEGACY:
            return os.environ.get(LEGACY_PROJECT_ENV, LEGACY_PROJECT_DEFAULT)
        if self.project_id is None:
            if self.category is LoopCategory.TENANT:
                return DEFAULT_TENANT_PROJECT
            raise ValueError(f"per-tenant loop {self.name} needs a project_id per instance")
        return self.project_id


def backoff_delay(interval_s: float, consecutive_failures: int) -> float:
    """Pure: the pause after ``consecutive_failures`` failed iterations in a row."""
    cap = min(60.0, 10 * interval_s)
    base: float = min(cap, interval_s * 2.0 ** max(0, consecutive_failures - 1))
    return base * random.uniform(0.8, 1.0)


async def run_iteration(spec: LoopSpec, ctx: LoopContext) -> bool:
    """One iteration with context, span and metrics; True when it succeeded."""
    project_id = ctx.project_id
    with (
        bound(project_id=project_id, trace_id=new_trace_id()),
        tracer.start_as_current_span(
            f"loop {spec.name}",
            attributes={"awooop.loop": spec.name, "awooop.project_id": project_id},
        ) as span,
    ):
        started = time.perf_counter()
        try:
            await spec.body(ctx)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            span.record_exception(exc)
            span.set_status(trace.StatusCode.ERROR)
            metrics.LOOP_ERRORS.labels(spec.name, project_id).inc()
            log.exception("loop_iteration_failed", loop=spec.name, iteration=ctx.iteration)
            return False
        finally:
            metrics.LOOP_SECONDS.labels(spec.name).observe(time.perf_counter() - started)
        metrics.LOOP_LAST_RUN.labels(spec.name, project_id).set(time.time())
        return True


async def run_loop(spec: LoopSpec, stop: asyncio.Event, ctx: LoopContext | None = None) -> None:
    """Run ``spec`` until ``stop`` is set; never returns early because a body raised."""
    ctx = ctx or LoopContext(project_id=spec.resolved_project_id())
    failures = 0
    log.info(
        "loop_started",
        loop=spec.name,
        category=str(spec.category),
        project_id=ctx.project_id,
        interval_s=spec.interval_s,
    )
    while not stop.is_set():
        ctx.iteration += 1
        ctx.wakeup.clear()
        ok = await run_iteration(spec, ctx)
        failures = 0 if ok else failures + 1
        delay = spec.interval_s if ok else backoff_delay(spec.interval_s, failures)
        await _sleep_until(delay, stop, ctx.wakeup if ok else None)
    log.info("loop_stopped", loop=spec.name, project_id=ctx.project_id)


async def _sleep_until(delay: float, stop: asyncio.Event, wakeup: asyncio.Event | None) -> None:
    waiters = [asyncio.ensure_future(stop.wait())]
    if wakeup is not None:
        waiters.append(asyncio.ensure_future(wakeup.wait()))
    try:
        await asyncio.wait(waiters, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
