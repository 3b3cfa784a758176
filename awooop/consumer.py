"""The consumer library: a service's own read models and event handlers, with the guarantees of
the built-in projectors (docs/consumers.md).

A :class:`Projection` (subclass it: ``name``, ``event_types``, ``table``, ``key``, ``apply``)
runs in either of two places, through the same runner, loops and consumer groups as the
built-in projections (:mod:`awooop.projections.runner`, :mod:`awooop.loops.projector`):

- ``awooop projector``, once registered (the ``awooop.projections`` entry point group of the
  service's distribution, ``AWOOOP_PROJECTIONS`` or ``--projection module:object``); and
  ``awooop replay NAME`` rebuilds its table (shadow, verify, swap);
- the service's own process: :class:`Consumer` (``await Consumer(OrderTotals()).run(stop)``),
  or :func:`consume` for a handler without a table of its own.

Either way: the events of the streams it follows arrive through the consumer group
``projector:<name>`` on every shard's events stream, each stream's in version order; a gap
is filled from the Postgres log; ``apply`` runs in the transaction that also stores the
checkpoint (a redelivered event is recognised and not applied twice); another process takes
over the messages a dead one left pending after ``AWOOOP_PROJECTOR_RECLAIM_IDLE_S``; and
whatever Redis lost is applied from Postgres (at start, every
``AWOOOP_PROJECTOR_RECONCILE_INTERVAL_S``, and as soon as the relay has rebuilt a shard).

The process reads every project's events: it logs in as the runtime does
(``AWOOOP_DATABASE_URL``, the platform role), as a projector process.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from awooop.core.config import Settings, load_settings
from awooop.core.db import Connection
from awooop.core.events import DOMAIN_PREFIX
from awooop.core.loop_heartbeats import DatabaseHeartbeats
from awooop.core.loops import run_loops, set_heartbeat_sink
from awooop.loops.projector import consumer_for, projection_loops
from awooop.projections import registry
from awooop.projections.custom import Projection, Record
from awooop.projections.registered import Registered, registered
from awooop.projections.runner import Projector
from awooop.services import Services

__all__ = ["Consumer", "Projection", "Record", "consume"]

Handler = Callable[[Connection, Sequence[Record]], Awaitable[None]]
SOURCE = "awooop.consumer"


class Consumer:
    """Runs projections in this process (see the module docstring)."""

    def __init__(
        self,
        *projections: Projection,
        settings: Settings | None = None,
        name: str | None = None,
    ) -> None:
        """``name``: this process's consumer name in the groups (default host:pid); two live
        processes must not share one."""
        if not projections:
            raise ValueError("a Consumer needs at least one projection")
        self.settings = settings or load_settings()
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.projections: list[Registered] = [registered(p, SOURCE) for p in projections]
        names = [p.name for p in self.projections]
        if len(set(names)) != len(names):
            raise ValueError(f"projection names must differ: {names}")

    async def _open(self, stop: asyncio.Event | None = None) -> Services | None:
        if stop is None:
            services: Services | None = await Services.open_when_reachable(self.settings)
        else:
            services = await Services.open_when_reachable(self.settings, stop=stop, kind="consumer")
        if services is None:
            return None
        try:
            await registry.check_tables(services.db, self.projections)
        except BaseException:
            await services.close()
            raise
        return services

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set; then let each loop finish its window (up to
        ``AWOOOP_SHUTDOWN_GRACE_S``). The tables are checked first (E-PROJECTION-003/-004)."""
        services = await self._open(stop)
        if services is None:
            return
        previous_sink = set_heartbeat_sink(DatabaseHeartbeats(services.db))
        try:
            specs = projection_loops(services, self.projections, consumer=self.name)
            await run_loops(specs, stop, grace_s=self.settings.shutdown_grace_s)
        finally:
            set_heartbeat_sink(previous_sink)
            await services.close()

    async def drain(self, idle_ms: int = 200) -> int:
        """Burst mode (tests, tools): apply from Postgres what the views miss, then handle the
        stream messages until none came for ``idle_ms``; return how many events were applied
        from Postgres plus how many messages were handled."""
        services = await self._open()
        assert services is not None
        try:
            done = 0
            for projection in self.projections:
                projector = Projector(services.db, projection)
                done += await projector.reconcile()
                consumer = consumer_for(services, projector, f"{self.name}:{projector.name}")
                done += await consumer.run_until_idle(idle_ms)
            return done
        finally:
            await services.close()


async def consume(
    name: str,
    event_types: Sequence[str],
    handler: Handler,
    stop: asyncio.Event,
    *,
    streams: str = DOMAIN_PREFIX,
    settings: Settings | None = None,
) -> None:
    """Run ``handler(conn, records)`` for the events of ``event_types`` until ``stop`` is set:
    a :class:`Projection` without a table (it cannot be rebuilt), whose handler's writes
    commit with its checkpoint."""
    projection = _handler_projection(name, frozenset(event_types), streams, handler)
    await Consumer(projection, settings=settings).run(stop)


def _handler_projection(
    name: str, event_types: frozenset[str], streams: str, handler: Handler
) -> Projection:
    async def apply(self: Any, conn: Connection, table: str, records: Sequence[Record]) -> None:
        await handler(conn, records)

    kind: type[Projection] = type(
        f"Handler_{name}",
        (Projection,),
        {"name": name, "event_types": event_types, "streams": streams, "apply": apply},
    )
    return kind()
