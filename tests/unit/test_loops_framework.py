"""The loop framework (R-40, R-41, R-42): categories, failures, gauges, context, stop."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import uuid
from typing import Any

import pytest
from prometheus_client import REGISTRY

from awooop.core import loops
from awooop.core.context import project_id_var, trace_id_var
from awooop.core.logs import get_logger
from awooop.core.loops import (
    Heartbeat,
    LoopCategory,
    LoopContext,
    LoopSpec,
    PerTenantSupervisor,
    backoff_delay,
    run_loop,
    run_loops,
)
from tests.support.logcapture import capture_context_logs
from tests.support.waiting import eventually

log = get_logger("tests.loops")


def unique(name: str) -> str:
    return f"{name}_{uuid.uuid4().hex[:8]}"


def last_run(name: str, project: str) -> float | None:
    return REGISTRY.get_sample_value(
        "awooop_background_loop_last_run_timestamp", {"loop_name": name, "project_id": project}
    )


def errors(name: str, project: str) -> float | None:
    return REGISTRY.get_sample_value(
        "awooop_background_loop_errors_total", {"loop_name": name, "project_id": project}
    )


class Beats:
    """A heartbeat sink that keeps what it was given."""

    def __init__(self) -> None:
        self.beats: list[Heartbeat] = []

    async def record(self, beat: Heartbeat) -> None:
        self.beats.append(beat)


# --- categories (R-40) ---------------------------------------------------------------------------


async def _noop(_ctx: LoopContext) -> None:
    return None


def test_category_projects(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOOP_PROJECT_ID", raising=False)
    spec = LoopSpec("x", LoopCategory.PLATFORM, 1, _noop, project_id="ignored")
    assert spec.resolved_project_id() == "__platform__"
    assert LoopSpec("x", LoopCategory.TENANT, 1, _noop).resolved_project_id() == "awoooi"
    assert LoopSpec("x", LoopCategory.TENANT, 1, _noop, "p7").resolved_project_id() == "p7"
    legacy = LoopSpec("x", LoopCategory.LEGACY, 1, _noop)
    assert legacy.resolved_project_id() == "legacy_awoooi_default"
    monkeypatch.setenv("LOOP_PROJECT_ID", "acme")
    assert legacy.resolved_project_id() == "acme"
    template = LoopSpec("x", LoopCategory.PER_TENANT, 1, _noop)
    assert template.is_template
    with pytest.raises(ValueError, match="per-tenant"):
        template.resolved_project_id()
    instance = template.for_project("p1")
    assert not instance.is_template and instance.resolved_project_id() == "p1"


def test_backoff_grows_and_is_capped() -> None:
    delays = [backoff_delay(1.0, n) for n in range(1, 12)]
    assert 0.8 <= delays[0] <= 1.0
    assert 3.2 <= delays[2] <= 4.0
    assert all(d <= 10.0 for d in delays)  # 10 intervals
    assert max(backoff_delay(30.0, n) for n in range(1, 20)) <= 60.0  # or 60 s


# --- failures and gauges (R-42) -------------------------------------------------------------------


async def test_failing_loop_keeps_running_counts_errors_and_its_gauge_stops() -> None:
    name = unique("flaky")
    calls = 0

    async def body(_ctx: LoopContext) -> None:
        nonlocal calls
        calls += 1
        if calls > 2:
            raise RuntimeError(f"boom {calls}")

    stop = asyncio.Event()
    beats = Beats()
    spec = LoopSpec(name, LoopCategory.TENANT, 0.02, body, project_id="p-flaky")
    task = asyncio.create_task(run_loop(spec, stop, heartbeat=beats))
    await eventually(
        lambda: calls >= 2 and last_run(name, "p-flaky") is not None,
        what="two iterations and a last-run gauge",
    )
    await eventually(
        lambda: (errors(name, "p-flaky") or 0) >= 1, what="the first loop error counted"
    )
    frozen = last_run(name, "p-flaky")
    await eventually(lambda: (errors(name, "p-flaky") or 0) >= 3, what="three loop errors counted")
    assert not task.done()  # the loop goes on after failures
    assert last_run(name, "p-flaky") == frozen  # no success, no advance
    assert calls >= 5
    stop.set()
    await asyncio.wait_for(task, 2)
    failed = [b for b in beats.beats if not b.ok]
    assert failed[0].error is not None and failed[0].error.startswith("RuntimeError: boom")
    assert [b.consecutive_failures for b in failed[:3]] == [1, 2, 3]


async def test_healthy_loop_gauge_advances_each_interval() -> None:
    name = unique("healthy")
    seen: list[float] = []

    async def body(_ctx: LoopContext) -> None:
        value = last_run(name, "__platform__")
        if value is not None:
            seen.append(value)

    stop = asyncio.Event()
    spec = LoopSpec(name, LoopCategory.PLATFORM, 0.05, body)
    task = asyncio.create_task(run_loop(spec, stop))
    await eventually(lambda: len(seen) >= 4, what="four iterations that saw the last-run gauge")
    stop.set()
    await asyncio.wait_for(task, 2)
    assert all(b > a for a, b in itertools.pairwise(seen)), seen
    assert errors(name, "__platform__") == 0.0  # the series exists from the start


async def test_failure_backs_off_instead_of_spinning() -> None:
    name = unique("always_failing")
    calls = 0

    async def body(_ctx: LoopContext) -> None:
        nonlocal calls
        calls += 1
        raise ValueError("nope")

    stop = asyncio.Event()
    task = asyncio.create_task(run_loop(LoopSpec(name, LoopCategory.PLATFORM, 0.05, body), stop))
    await asyncio.sleep(0.5)
    stop.set()
    await asyncio.wait_for(task, 2)
    # 0.05, 0.1, 0.2, 0.4 ... (x0.8-1.0): at most ~5 calls in 0.5 s, not 10.
    assert 2 <= calls <= 6
    assert errors(name, "__platform__") == calls


# --- context: project_id and a fresh trace_id per iteration (R-41, R-52) --------------------------


async def test_each_iteration_logs_a_new_trace_id_and_the_project() -> None:
    name = unique("traced")
    inside: list[tuple[str | None, str | None]] = []

    async def body(ctx: LoopContext) -> None:
        inside.append((project_id_var.get(), trace_id_var.get()))
        log.info("tick", n=ctx.iteration)
        if ctx.iteration == 2:
            raise RuntimeError("second iteration fails")

    stop = asyncio.Event()
    with capture_context_logs() as lines:
        task = asyncio.create_task(
            run_loop(LoopSpec(name, LoopCategory.TENANT, 0.01, body, project_id="acme"), stop)
        )
        await eventually(lambda: len(inside) >= 4, what="four iterations")
        stop.set()
        await asyncio.wait_for(task, 2)
    ticks = [line for line in lines if line["event"] == "tick"]
    failures = [line for line in lines if line["event"] == "loop_iteration_failed"]
    assert len(ticks) >= 4 and len(failures) == 1
    # add_context ran: project_id and trace_id come from context, the call passed neither.
    assert {t["project_id"] for t in ticks} == {"acme"}
    trace_ids = [t["trace_id"] for t in ticks]
    assert all(isinstance(t, str) and len(t) == 32 for t in trace_ids)
    assert len(set(trace_ids)) == len(trace_ids)  # a new one each iteration
    assert [t["trace_id"] for t in ticks] == [tid for _, tid in inside[: len(ticks)]]
    # the failure line carries the failing iteration's context
    assert failures[0]["project_id"] == "acme" and failures[0]["trace_id"] == inside[1][1]
    assert project_id_var.get() is None and trace_id_var.get() is None  # nothing leaks out


async def test_iteration_span_is_a_root_span_whose_trace_id_the_logs_carry(spans: Any) -> None:
    name = unique("spanned")
    seen: list[str | None] = []

    async def body(_ctx: LoopContext) -> None:
        seen.append(trace_id_var.get())
        if len(seen) == 2:
            raise KeyError("x")

    stop = asyncio.Event()
    task = asyncio.create_task(run_loop(LoopSpec(name, LoopCategory.PLATFORM, 0.01, body), stop))
    await eventually(lambda: len(seen) >= 3, what="three iterations")
    stop.set()
    await asyncio.wait_for(task, 2)
    mine = [s for s in spans.get_finished_spans() if s.name == f"loop {name}"]
    assert len(mine) >= 3
    assert [format(s.context.trace_id, "032x") for s in mine] == seen[: len(mine)]
    assert all(s.parent is None for s in mine)
    assert mine[0].attributes["awooop.project_id"] == "__platform__"
    assert mine[1].status.status_code.name == "ERROR"
    assert any(e.name == "exception" for e in mine[1].events)


# --- heartbeats -----------------------------------------------------------------------------------


async def test_a_failing_heartbeat_sink_does_not_fail_the_loop() -> None:
    name = unique("sinkless")
    calls = 0

    class Broken:
        async def record(self, beat: Heartbeat) -> None:
            raise ConnectionError("database away")

    async def body(_ctx: LoopContext) -> None:
        nonlocal calls
        calls += 1

    stop = asyncio.Event()
    spec = LoopSpec(name, LoopCategory.PLATFORM, 0.01, body)
    with capture_context_logs() as lines:
        task = asyncio.create_task(run_loop(spec, stop, heartbeat=Broken()))
        await eventually(lambda: calls >= 3, what="three iterations past a failing heartbeat sink")
        stop.set()
        await asyncio.wait_for(task, 2)
    assert errors(name, "__platform__") == 0.0
    assert any(line["event"] == "loop_heartbeat_failed" for line in lines)


async def test_process_sink_is_used_by_default() -> None:
    beats = Beats()
    previous = loops.set_heartbeat_sink(beats)
    name = unique("default_sink")
    try:
        stop = asyncio.Event()
        task = asyncio.create_task(run_loop(LoopSpec(name, LoopCategory.LEGACY, 0.01, _noop), stop))
        await eventually(lambda: len(beats.beats) >= 2, what="two heartbeats in the process sink")
        stop.set()
        await asyncio.wait_for(task, 2)
    finally:
        loops.set_heartbeat_sink(previous)
    assert beats.beats[0].loop_name == name and beats.beats[0].category == "legacy"
    assert beats.beats[0].ok and beats.beats[0].error is None


# --- stop and per-tenant instances ----------------------------------------------------------------


async def test_stop_lets_the_current_iteration_finish() -> None:
    name = unique("slow")
    finished = asyncio.Event()
    started = asyncio.Event()

    async def body(_ctx: LoopContext) -> None:
        started.set()
        await asyncio.sleep(0.2)
        finished.set()

    stop = asyncio.Event()
    task = asyncio.create_task(
        run_loops([LoopSpec(name, LoopCategory.PLATFORM, 10, body)], stop, grace_s=5)
    )
    await started.wait()
    stop.set()
    await asyncio.wait_for(task, 3)
    assert finished.is_set()


async def test_an_iteration_past_the_grace_is_cancelled() -> None:
    name = unique("stuck")
    started = asyncio.Event()
    cancelled = False

    async def body(_ctx: LoopContext) -> None:
        nonlocal cancelled
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled = True
            raise

    stop = asyncio.Event()
    task = asyncio.create_task(
        run_loops([LoopSpec(name, LoopCategory.PLATFORM, 10, body)], stop, grace_s=0.1)
    )
    await started.wait()
    stop.set()
    await asyncio.wait_for(task, 3)
    assert cancelled


async def test_per_tenant_templates_need_a_project_source() -> None:
    template = LoopSpec(unique("pt"), LoopCategory.PER_TENANT, 1, _noop)
    with pytest.raises(ValueError, match="project source"):
        await run_loops([template], asyncio.Event())


async def test_per_tenant_supervisor_follows_the_project_list() -> None:
    name = unique("per_tenant")
    projects = ["a", "b", "__platform__"]
    ran: dict[str, set[str | None]] = {}

    async def body(ctx: LoopContext) -> None:
        ran.setdefault(ctx.project_id, set()).add(trace_id_var.get())

    async def source() -> list[str]:
        return list(projects)

    template = LoopSpec(name, LoopCategory.PER_TENANT, 0.01, body)
    supervisor = PerTenantSupervisor([template], source, interval_s=0.02, name=unique("sup"))
    stop = asyncio.Event()
    task = asyncio.create_task(run_loop(supervisor.spec(), stop))
    await eventually(
        lambda: supervisor.running() == {(name, "a"), (name, "b")},
        what="instances for projects a and b",
    )
    await eventually(
        lambda: (
            len(ran.get("a", ())) >= 2
            and last_run(name, "a") is not None
            and last_run(name, "b") is not None
        ),
        what="two iterations for a and a last-run gauge for a and b",
    )
    projects[:] = ["b", "c"]
    await eventually(
        lambda: supervisor.running() == {(name, "b"), (name, "c")},
        what="instances for projects b and c only",
    )
    stop.set()
    await asyncio.wait_for(task, 2)
    await supervisor.stop_all(grace_s=1)
    assert supervisor.running() == set()
    assert "__platform__" not in ran
    # instances do not inherit the supervisor's trace: ids differ from run to run
    assert len(ran["a"]) >= 2


async def test_a_failing_project_source_keeps_instances_running() -> None:
    name = unique("kept")
    fail = False

    async def source() -> list[str]:
        if fail:
            raise ConnectionError("db away")
        return ["a"]

    template = LoopSpec(name, LoopCategory.PER_TENANT, 0.01, _noop)
    sup_name = unique("sup")
    supervisor = PerTenantSupervisor([template], source, interval_s=0.02, name=sup_name)
    stop = asyncio.Event()
    task = asyncio.create_task(run_loop(supervisor.spec(), stop))
    await eventually(
        lambda: supervisor.running() == {(name, "a")}, what="the instance for project a"
    )
    fail = True
    await eventually(
        lambda: (errors(sup_name, "__platform__") or 0) >= 1,
        what="the failing project source counted as a supervisor error",
    )
    assert supervisor.running() == {(name, "a")}
    stop.set()
    await asyncio.wait_for(task, 2)
    await supervisor.stop_all(grace_s=1)


async def test_one_trace_helper_finds_a_chain_and_refuses_a_broken_one(spans: Any) -> None:
    from awooop.core.telemetry import tracer
    from tests.support.tracing import one_trace

    with tracer.start_as_current_span("ingest"), tracer.start_as_current_span("relay publish"):
        pass
    with tracer.start_as_current_span("llm call"):
        pass
    assert set(one_trace(spans, "ingest", "relay publish")) == {"ingest", "relay publish"}
    with pytest.raises(AssertionError, match="different traces"):
        one_trace(spans, "ingest", "llm call")
    with pytest.raises(AssertionError, match="no span named"):
        one_trace(spans, "consume")


async def test_a_cancel_an_iteration_swallowed_still_ends_the_loop() -> None:
    """Python 3.11's asyncio.wait_for can swallow a cancellation that arrives as its inner
    await completes (gh-86296): the first iteration here swallows it outright. The loop task
    was cancelled, so it ends before another iteration instead of running on (a relay "crashed"
    by a test kept publishing, and the await of its task never returned)."""
    name = unique("swallower")
    iterations = 0
    inside = asyncio.Event()

    async def body(_ctx: LoopContext) -> None:
        nonlocal iterations
        iterations += 1
        if iterations == 1:
            inside.set()
            with contextlib.suppress(asyncio.CancelledError):  # what the swallowing await does
                await asyncio.sleep(60)

    stop = asyncio.Event()
    task = asyncio.create_task(run_loop(LoopSpec(name, LoopCategory.PLATFORM, 0.01, body), stop))
    try:
        await inside.wait()
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=3)
        assert task in done, f"the loop ran on after its cancel: {iterations} iterations"
        assert task.cancelled() and iterations == 1
    finally:
        stop.set()  # without the check, the loop runs on until this
        await asyncio.wait({task}, timeout=3)
