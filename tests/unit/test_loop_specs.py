"""Building the loops is free of effects, so ``awooop up`` and ``awooop loops`` may build them
whenever they need the list: nothing is opened or registered until a loop runs, and a loop
that holds something between iterations releases it when it ends."""

from __future__ import annotations

import asyncio

from awooop.core.context import PLATFORM_PROJECT
from awooop.core.loops import LoopCategory, LoopContext, LoopSpec, run_loop
from awooop.loops.registry import all_loops
from awooop.services import Services
from awooop.streams.relay import Relay
from tests.support.waiting import eventually


async def test_building_the_loops_twice_registers_nothing(services: Services) -> None:
    closers = list(services.closers)
    first, second = all_loops(services), all_loops(services)
    assert services.closers == closers
    assert [(s.name, s.project_id) for s in first] == [(s.name, s.project_id) for s in second]
    (relay,) = [s for s in first if s.name == "relay"]
    # the relay the spec steps is the one it closes (its cursor saved, its lease released)
    assert relay.close is not None
    assert getattr(relay.body, "__self__", None) is getattr(relay.close, "__self__", None)
    assert isinstance(getattr(relay.body, "__self__", None), Relay)


async def test_a_loop_releases_what_it_holds_once_when_it_ends() -> None:
    closed: list[str] = []
    iterations: list[int] = []

    async def body(ctx: LoopContext) -> None:
        iterations.append(ctx.iteration)

    async def close() -> None:
        closed.append("closed")

    spec = LoopSpec("holds", LoopCategory.PLATFORM, 0.01, body, close=close)
    stop = asyncio.Event()
    task = asyncio.create_task(run_loop(spec, stop, LoopContext(project_id=PLATFORM_PROJECT)))
    await eventually(lambda: len(iterations) >= 2, what="two iterations")
    assert closed == []  # held while the loop runs
    stop.set()
    await asyncio.wait_for(task, 10)
    assert closed == ["closed"]
