"""Loop iterations are sampled by ``AWOOOP_LOOP_TRACE_SAMPLE_RATIO`` and a failed iteration is
always kept, with its child spans; other spans follow the configured sampler. Resources name
the service version, the instance and the host."""

from __future__ import annotations

import asyncio
import importlib.metadata
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.context import Context

from awooop.core.context import trace_id_var
from awooop.core.loop_sampling import DEFAULT_LOOP_RATIO, LOOP_RATIO_ENV, loop_ratio_from_env
from awooop.core.loops import LoopCategory, LoopContext, LoopSpec, run_loop
from awooop.core.telemetry import INSTANCE_ID, resource, set_loop_sample_ratio, tracer
from tests.support.waiting import eventually


@pytest.fixture
def loop_ratio(spans: Any) -> Iterator[Any]:
    """The ``spans`` exporter with the production default loop ratio (0.01)."""
    previous = set_loop_sample_ratio(DEFAULT_LOOP_RATIO)
    try:
        yield spans
    finally:
        set_loop_sample_ratio(previous)


def test_the_default_ratio_is_low_and_the_setting_is_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(LOOP_RATIO_ENV, raising=False)
    assert loop_ratio_from_env() == DEFAULT_LOOP_RATIO == 0.01
    monkeypatch.setenv(LOOP_RATIO_ENV, "0.5")
    assert loop_ratio_from_env() == 0.5
    for bad in ("2", "-0.1", "lots"):
        monkeypatch.setenv(LOOP_RATIO_ENV, bad)
        with pytest.raises(ValueError, match=LOOP_RATIO_ENV):
            loop_ratio_from_env()


def test_about_one_loop_iteration_in_a_hundred_is_exported_others_all(loop_ratio: Any) -> None:
    for i in range(3000):
        with (
            tracer.start_as_current_span(
                "loop tick", context=Context(), attributes={"awooop.loop": "tick"}
            ),
            tracer.start_as_current_span("inside"),
        ):
            pass
        if i < 50:
            with tracer.start_as_current_span("ingest", context=Context()):
                pass
    finished = loop_ratio.get_finished_spans()
    loops = [s for s in finished if s.name == "loop tick"]
    assert 5 <= len(loops) <= 90, len(loops)  # expected 30; by trace id, so random
    # An exported iteration is whole: its child spans come with it.
    inside = [s for s in finished if s.name == "inside"]
    assert {s.context.trace_id for s in inside} == {s.context.trace_id for s in loops}
    assert len([s for s in finished if s.name == "ingest"]) == 50  # not a loop: all of them


async def test_a_failed_iteration_is_always_exported_with_its_children(loop_ratio: Any) -> None:
    set_loop_sample_ratio(0.0)  # no iteration picked by the ratio: only failures show
    name = f"flaky-{uuid.uuid4().hex[:8]}"
    seen: list[str | None] = []

    async def body(_ctx: LoopContext) -> None:
        seen.append(trace_id_var.get())
        with tracer.start_as_current_span("query"):
            pass
        if len(seen) == 2:
            raise KeyError("boom")

    stop = asyncio.Event()
    task = asyncio.create_task(run_loop(LoopSpec(name, LoopCategory.PLATFORM, 0.01, body), stop))
    await eventually(lambda: len(seen) >= 4, interval_s=0.01, what="four iterations")
    stop.set()
    await asyncio.wait_for(task, 10)
    assert len(seen) >= 4
    finished = loop_ratio.get_finished_spans()
    mine = [s for s in finished if s.name == f"loop {name}"]
    assert len(mine) == 1, [s.name for s in finished]  # only the failed one
    [failed] = mine
    assert failed.status.status_code.name == "ERROR"
    assert any(e.name == "exception" for e in failed.events)
    assert failed.context.trace_flags.sampled
    assert format(failed.context.trace_id, "032x") == seen[1]  # the trace id its logs carry
    children = [s for s in finished if s.context.trace_id == failed.context.trace_id]
    assert sorted(s.name for s in children) == sorted([f"loop {name}", "query"])
    [query] = [s for s in children if s.name == "query"]
    assert query.parent is not None and query.parent.span_id == failed.context.span_id


def test_resources_name_version_instance_and_host() -> None:
    attributes = resource("awooop-test").attributes
    assert attributes["service.version"] == importlib.metadata.version("awooop")
    assert attributes["service.instance.id"] == INSTANCE_ID
    assert uuid.UUID(str(INSTANCE_ID))
    assert attributes["host.name"] == socket.gethostname()
