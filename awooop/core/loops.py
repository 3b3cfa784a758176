"""The background loop framework (R-40, R-41, R-42).

A loop declares its name, category, interval and body (one iteration). :func:`run_loop`
runs iterations until ``stop`` is set; each iteration has ``project_id`` and a fresh
``trace_id`` in context variables and runs inside a span (the span's trace id IS the bound
trace id, so logs and Tempo agree); success sets
``awooop_background_loop_last_run_timestamp{loop_name, project_id}``; an exception is logged
with context, counted in ``awooop_background_loop_errors_total``, and the loop goes on after
an exponential backoff (capped at 10 intervals or 60 s). A body may set ``ctx.wakeup`` (for
example from a LISTEN callback) to start the next iteration before the interval ends.

Categories (R-40): ``platform`` runs as ``__platform__``; ``tenant`` for one fixed project
(default ``awoooi``); ``legacy`` takes its project from ``LOOP_PROJECT_ID`` (default
``legacy_awoooi_default``); ``per-tenant`` runs one instance per project. A per-tenant spec
without a project is a template: :func:`run_loops` expands it with a :class:`PerTenantSupervisor`
(itself a platform loop) that starts an instance for each project the ``projects`` source
returns (``awooop_projects``, see :mod:`awooop.core.loop_heartbeats`) and stops instances of
projects that disappear or are disabled.

After every iteration a loop reports a :class:`Heartbeat` to the process's heartbeat sink
(installed with :func:`set_heartbeat_sink`, e.g. the Postgres table behind ``awooop loops
list``); a sink that fails is logged and never fails the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import enum
import os
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Protocol

from opentelemetry import context as otel_context
from opentelemetry import trace

from awooop.core import metrics
from awooop.core.context import PLATFORM_PROJECT, bound, new_trace_id
from awooop.core.logs import get_logger
from awooop.core.telemetry import tracer

log = get_logger(__name__)

DEFAULT_TENANT_PROJECT = "awoooi"
LEGACY_PROJECT_ENV = "LOOP_PROJECT_ID"
LEGACY_PROJECT_DEFAULT = "legacy_awoooi_default"
HEARTBEAT_TIMEOUT_S = 5.0


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
    last_error: str | None = None  # "ExcType: message" of the last failed iteration


LoopBody = Callable[[LoopContext], Awaitable[None]]


@dataclass(frozen=True)
class LoopSpec:
    name: str
    category: LoopCategory
    interval_s: float
    body: LoopBody
    project_id: str | None = None  # tenant: the fixed project; per-tenant: the instance's
    description: str = ""
    # How long one healthy iteration may run: a projector's consumer window. 0 for bodies that
    # do one pass and return.
    iteration_s: float = 0.0
    # What the loop holds between iterations (the relay's connection and lease), released by
    # run_loop when the loop ends: building a spec opens and registers nothing.
    close: Callable[[], Awaitable[None]] | None = None

    @property
    def cycle_s(self) -> float:
        """The longest time between two iteration ends of a healthy loop: what its heartbeats
        report as ``interval_s`` and what ``awooop doctor`` judges staleness against."""
        return self.interval_s + self.iteration_s

    def resolved_project_id(self) -> str:
        if self.category is LoopCategory.PLATFORM:
            return PLATFORM_PROJECT
        if self.category is LoopCategory.LEGACY:
            return os.environ.get(LEGACY_PROJECT_ENV) or LEGACY_PROJECT_DEFAULT
        if self.project_id is None:
            if self.category is LoopCategory.TENANT:
                return DEFAULT_TENANT_PROJECT
            raise ValueError(f"per-tenant loop {self.name} needs a project_id per instance")
        return self.project_id

    @property
    def is_template(self) -> bool:
        """A per-tenant spec without a project: one instance per project is run from it."""
        return self.category is LoopCategory.PER_TENANT and self.project_id is None

    def for_project(self, project_id: str) -> LoopSpec:
        return replace(self, project_id=project_id)


# --- heartbeats -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Heartbeat:
    loop_name: str
    project_id: str
    category: str
    interval_s: float  # the loop's cycle (LoopSpec.cycle_s): sleep + longest healthy iteration
    ok: bool
    consecutive_failures: int
    error: str | None = None


class HeartbeatSink(Protocol):
    """Where loops report each iteration. ``record`` is awaited on the loop's own path after
    every iteration: it must return at once when it has nothing to do, and bound any I/O it
    does (``HEARTBEAT_TIMEOUT_S``); a raise is logged and ignored."""

    async def record(self, beat: Heartbeat) -> None: ...


_heartbeat_sink: HeartbeatSink | None = None


def set_heartbeat_sink(sink: HeartbeatSink | None) -> HeartbeatSink | None:
    """Install the process-wide heartbeat sink (None: none); returns the previous one."""
    global _heartbeat_sink  # one sink per process, like the metrics registry
    previous, _heartbeat_sink = _heartbeat_sink, sink
    return previous


async def _report(sink: HeartbeatSink | None, beat: Heartbeat) -> None:
    if sink is None:
        return
    try:
        await sink.record(beat)  # no task per iteration: the sink bounds its own I/O
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.warning("loop_heartbeat_failed", loop=beat.loop_name, error=_describe(exc))


# --- one loop -----------------------------------------------------------------------------------


def backoff_delay(interval_s: float, consecutive_failures: int) -> float:
    """Pure: the pause after ``consecutive_failures`` failed iterations in a row."""
    cap = min(60.0, 10 * interval_s)
    base: float = min(cap, interval_s * 2.0 ** max(0, consecutive_failures - 1))
    return base * random.uniform(0.8, 1.0)


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 500 else text[:497] + "..."


async def run_iteration(spec: LoopSpec, ctx: LoopContext) -> bool:
    """One iteration with context, span and metrics; True when it succeeded."""
    project_id = ctx.project_id
    with tracer.start_as_current_span(
        f"loop {spec.name}",
        context=otel_context.Context(),  # a root span: every iteration is a trace of its own
        attributes={"awooop.loop": spec.name, "awooop.project_id": project_id},
    ) as span:
        span_context = span.get_span_context()
        # With an SDK installed the span has a fresh trace id (a loop span is a root span);
        # bind exactly that one so logs name the trace Tempo has. Without one, a fresh id.
        trace_id = (
            format(span_context.trace_id, "032x") if span_context.is_valid else new_trace_id()
        )
        with bound(project_id=project_id, trace_id=trace_id):
            started = time.perf_counter()
            try:
                await spec.body(ctx)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                span.record_exception(exc)
                span.set_status(trace.StatusCode.ERROR)
                metrics.LOOP_ERRORS.labels(spec.name, project_id).inc()
                ctx.last_error = _describe(exc)
                log.exception("loop_iteration_failed", loop=spec.name, iteration=ctx.iteration)
                return False
            finally:
                metrics.LOOP_SECONDS.labels(spec.name).observe(time.perf_counter() - started)
            metrics.LOOP_LAST_RUN.labels(spec.name, project_id).set(time.time())
            return True


async def run_loop(
    spec: LoopSpec,
    stop: asyncio.Event,
    ctx: LoopContext | None = None,
    *,
    heartbeat: HeartbeatSink | None = None,
) -> None:
    """Run ``spec`` until ``stop`` is set; never returns early because a body raised.

    ``heartbeat`` defaults to the process-wide sink (:func:`set_heartbeat_sink`). An iteration
    in progress when ``stop`` is set runs to its end; callers that cannot wait cancel the task.
    """
    ctx = ctx or LoopContext(project_id=spec.resolved_project_id())
    sink = heartbeat if heartbeat is not None else _heartbeat_sink
    failures = 0
    # Create both series at once: rate() over the error counter works from the first scrape.
    metrics.LOOP_ERRORS.labels(spec.name, ctx.project_id)
    metrics.LOOP_INTERVAL.labels(spec.name, ctx.project_id).set(spec.cycle_s)
    log.info(
        "loop_started",
        loop=spec.name,
        category=str(spec.category),
        project_id=ctx.project_id,
        interval_s=spec.interval_s,
    )
    # ``stop`` also sets the wake-up: a sleeping loop waits on ONE event (a loop woken by NOTIFY
    # iterates hundreds of times a second; two waiter tasks per sleep cost turns each time).
    waker = asyncio.ensure_future(_wake_on_stop(stop, ctx.wakeup))
    this = asyncio.current_task()
    try:
        while not stop.is_set():
            if this is not None and this.cancelling():  # a cancel an await swallowed (3.11's
                raise asyncio.CancelledError  # wait_for can, gh-86296): the loop ends anyway
            ctx.iteration += 1
            ctx.wakeup.clear()
            ok = await run_iteration(spec, ctx)
            failures = 0 if ok else failures + 1
            await _report(
                sink,
                Heartbeat(
                    loop_name=spec.name,
                    project_id=ctx.project_id,
                    category=str(spec.category),
                    interval_s=spec.cycle_s,
                    ok=ok,
                    consecutive_failures=failures,
                    error=None if ok else ctx.last_error,
                ),
            )
            if ok:
                await _sleep_or_wakeup(spec.interval_s, ctx.wakeup)
            else:  # a wake-up does not cut a backoff short; stop does
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        stop.wait(), timeout=backoff_delay(spec.interval_s, failures)
                    )
    finally:
        waker.cancel()
        if spec.close is not None:
            await spec.close()
    log.info("loop_stopped", loop=spec.name, project_id=ctx.project_id)


async def _wake_on_stop(stop: asyncio.Event, wakeup: asyncio.Event) -> None:
    await stop.wait()
    wakeup.set()


async def _sleep_or_wakeup(delay: float, wakeup: asyncio.Event) -> None:
    """Until ``wakeup`` is set or ``delay`` passed; the timeout sets it too (the loop clears it
    before each iteration), so the wait is one future and one timer."""
    if wakeup.is_set():
        return
    timer = asyncio.get_running_loop().call_later(delay, wakeup.set)
    try:
        await wakeup.wait()
    finally:
        timer.cancel()


# --- many loops -------------------------------------------------------------------------------

ProjectSource = Callable[[], Awaitable[list[str]]]


class PerTenantSupervisor:
    """Keeps one instance of each per-tenant template running per project.

    :meth:`spec` is a platform loop whose iteration asks ``projects`` for the current list,
    starts instances for new projects and stops those of projects no longer listed. A failing
    ``projects`` call keeps the running instances as they are (the iteration fails, is
    counted and retried like any loop's).
    """

    def __init__(
        self,
        templates: Iterable[LoopSpec],
        projects: ProjectSource,
        interval_s: float = 30.0,
        name: str = "per_tenant_supervisor",
    ) -> None:
        self.templates = list(templates)
        self.projects = projects
        self.interval_s = interval_s
        self.name = name
        self._running: dict[tuple[str, str], tuple[asyncio.Task[None], asyncio.Event]] = {}

    def spec(self) -> LoopSpec:
        return LoopSpec(
            name=self.name,
            category=LoopCategory.PLATFORM,
            interval_s=self.interval_s,
            body=self._reconcile,
            description="starts and stops per-tenant loop instances as projects come and go",
        )

    def running(self) -> set[tuple[str, str]]:
        """(loop name, project) of the instances currently running."""
        return {key for key, (task, _) in self._running.items() if not task.done()}

    async def _reconcile(self, _ctx: LoopContext) -> None:
        wanted = {p for p in await self.projects() if p and p != PLATFORM_PROJECT}
        for template in self.templates:
            for project_id in sorted(wanted):
                key = (template.name, project_id)
                current = self._running.get(key)
                if current is None or current[0].done():
                    self._start(template.for_project(project_id))
        for key in [k for k in self._running if k[1] not in wanted]:
            task, child_stop = self._running.pop(key)
            child_stop.set()
            log.info("per_tenant_loop_retired", loop=key[0], instance_project=key[1])
            await asyncio.wait([task], timeout=max(self.interval_s, 1.0))

    def _start(self, spec: LoopSpec) -> None:
        assert spec.project_id is not None
        child_stop = asyncio.Event()
        # A fresh context: the instance must not inherit this iteration's span or project.
        task = asyncio.create_task(
            run_loop(spec, child_stop), name=f"loop {spec.name}", context=contextvars.Context()
        )
        self._running[(spec.name, spec.project_id)] = (task, child_stop)

    async def stop_all(self, grace_s: float) -> None:
        entries = list(self._running.values())
        self._running.clear()
        for _task, child_stop in entries:
            child_stop.set()
        await _finish([task for task, _ in entries], grace_s)


async def run_loops(
    specs: Iterable[LoopSpec],
    stop: asyncio.Event,
    *,
    projects: ProjectSource | None = None,
    grace_s: float = 20.0,
    supervisor_interval_s: float = 30.0,
) -> None:
    """Run every spec until ``stop`` is set, then give running iterations ``grace_s`` to end.

    Per-tenant templates need ``projects``; they run under one :class:`PerTenantSupervisor`.
    """
    specs = list(specs)
    templates = [s for s in specs if s.is_template]
    fixed = [s for s in specs if not s.is_template]
    supervisor: PerTenantSupervisor | None = None
    if templates:
        if projects is None:
            names = ", ".join(s.name for s in templates)
            raise ValueError(f"per-tenant loops need a project source: {names}")
        supervisor = PerTenantSupervisor(templates, projects, interval_s=supervisor_interval_s)
        fixed.append(supervisor.spec())
    tasks = [asyncio.create_task(run_loop(s, stop), name=f"loop {s.name}") for s in fixed]
    try:
        await stop.wait()
    finally:
        stop.set()
        await _finish(tasks, grace_s)
        if supervisor is not None:
            await supervisor.stop_all(grace_s)


async def _finish(tasks: list[asyncio.Task[None]], grace_s: float) -> None:
    """Wait up to ``grace_s`` for ``tasks`` to end by themselves, then cancel the rest."""
    if not tasks:
        return
    _done, pending = await asyncio.wait(tasks, timeout=grace_s)
    for task in pending:
        log.warning("loop_cancelled_after_grace", task=task.get_name(), grace_s=grace_s)
        task.cancel()
    if pending:
        await asyncio.wait(pending)
    for task in tasks:
        if not task.cancelled() and task.exception() is not None:
            log.error("loop_task_crashed", task=task.get_name(), exc_info=task.exception())
