"""Projector loops: for each projector projection, a consumer loop and a reconcile loop.

Both are platform loops (R-40): a projector works across projects with the platform role.

- ``projector:<name>`` reads every shard's events stream through the consumer group
  ``projector:<name>`` (``awooop.streams.consumer.GroupConsumer``) and hands each message to
  :meth:`awooop.projections.runner.Projector.handle`. One iteration consumes for a window of
  ``WINDOW_S`` seconds and then stops gracefully (in-flight messages finish and are
  acknowledged), so the loop's last-run gauge moves even under constant traffic and a stop
  request waits at most one window. Its first iteration reconciles with Postgres first. Entries
  left pending by a dead projector process are taken over after
  ``AWOOOP_PROJECTOR_RECLAIM_IDLE_S``; the consumer's ``on_reset`` (the relay rebuilt a shard
  after Redis lost it) reconciles at once.
- ``projector-reconcile:<name>`` applies from Postgres whatever the streams lost, every
  ``AWOOOP_PROJECTOR_RECONCILE_INTERVAL_S``.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Sequence

from awooop.core.loops import LoopCategory, LoopContext, LoopSpec
from awooop.projections import registry
from awooop.projections.base import Projection
from awooop.projections.runner import Projector
from awooop.projections.sources import parse_sources
from awooop.services import Services
from awooop.streams.consumer import GroupConsumer
from awooop.streams.keys import projector_group

WINDOW_S = 5.0
TOUCH_INTERVAL_MS = 5_000


def consumer_for(services: Services, projector: Projector, consumer: str) -> GroupConsumer:
    keys = services.keys
    settings = services.settings
    return GroupConsumer(
        services.redis,
        group=projector_group(projector.name),
        consumer=consumer,
        streams=[keys.events_stream(shard) for shard in keys.shards()],
        handler=projector.handle,
        max_in_flight=settings.projector_max_in_flight,
        keys=keys,
        on_reset=projector.on_reset,
        touch_interval_ms=TOUCH_INTERVAL_MS,
        reclaim_idle_ms=int(settings.projector_reclaim_idle_s * 1000),
        db=services.db,
        span_each=False,  # the projector spans each batch (awooop.projections.runner)
    )


def consumer_loop(
    services: Services,
    projector: Projector,
    window_s: float = WINDOW_S,
    *,
    consumer: str | None = None,
) -> LoopSpec:
    consumer_name = consumer or f"{socket.gethostname()}:{os.getpid()}:{projector.name}"
    group_consumer = consumer_for(services, projector, consumer_name)

    async def body(ctx: LoopContext) -> None:
        if ctx.iteration == 1:
            await projector.reconcile()  # whatever happened while no projector ran
        window = asyncio.Event()
        timer = asyncio.get_running_loop().call_later(window_s, window.set)
        try:
            await group_consumer.run(window)
        finally:
            timer.cancel()

    return LoopSpec(
        name=f"projector:{projector.name}",
        category=LoopCategory.PLATFORM,
        interval_s=0.01,  # the window is the pace; the next one starts at once
        iteration_s=window_s,
        body=body,
        description=f"apply the events streams to the {projector.name} read model",
    )


def reconcile_loop(services: Services, projector: Projector) -> LoopSpec:
    async def body(ctx: LoopContext) -> None:
        await projector.reconcile()

    return LoopSpec(
        name=f"projector-reconcile:{projector.name}",
        category=LoopCategory.PLATFORM,
        interval_s=services.settings.projector_reconcile_interval_s,
        body=body,
        description=f"apply from Postgres what the {projector.name} view missed on the streams",
    )


def projector_loops(services: Services, names: list[str]) -> list[LoopSpec]:
    return projection_loops(services, [registry.get(name) for name in names])


def projection_loops(
    services: Services, projections: Sequence[Projection], consumer: str | None = None
) -> list[LoopSpec]:
    """The two loops of each projection, built-in or a service's (``awooop.consumer`` runs
    them in a service's own process); ``consumer``: this process's name in the groups."""
    specs: list[LoopSpec] = []
    for projection in projections:
        projector = Projector(services.db, projection)
        name = consumer or f"{socket.gethostname()}:{os.getpid()}"
        specs += [
            consumer_loop(services, projector, consumer=f"{name}:{projector.name}"),
            reconcile_loop(services, projector),
        ]
    return specs


def loops(services: Services) -> list[LoopSpec]:
    """Every projector loop (listed in awooop.loops.registry.LOOP_MODULES): the built-in
    projections' and the registered ones' (entry points, ``AWOOOP_PROJECTIONS``)."""
    registry.use_sources(parse_sources(services.settings.projections))
    return projector_loops(services, registry.projector_names())
