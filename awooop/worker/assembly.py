"""One way to put a worker together, used by ``awooop worker``, ``awooop up`` and the tests.

:func:`worker_process` sets up what a process shares between its workers: the background
loops' heartbeats in Postgres (``awooop loops status``) and the model gateway (started on
entry, closed on exit). :func:`build_worker` assembles one worker: the runtime
(:class:`~awooop.worker.runtime.Worker`), its stream intake and the intake's reclaim loop
when it takes work from Redis, and the background loops it should also run (``awooop worker
--with-loops``); :meth:`WorkerParts.run` serves until the stop event is set.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.loop_heartbeats import DatabaseHeartbeats, project_source
from awooop.core.loops import LoopSpec, run_loop, run_loops, set_heartbeat_sink
from awooop.llm.gateway import ModelGateway
from awooop.runs.routing import ALL, Routes
from awooop.services import Services, when_reachable
from awooop.streams.keys import Keys
from awooop.worker.context import LLMClient, Notifier
from awooop.worker.executor import Handler
from awooop.worker.heartbeat import Toucher
from awooop.worker.local_timers import LocalTimers
from awooop.worker.runtime import Worker
from awooop.worker.streaming import StreamIntake

Task = Callable[[asyncio.Event], Awaitable[None]]


@dataclass
class WorkerParts:
    """A worker and what runs beside it (stream intake, reclaim loop, background loops): the
    ``extra`` tasks it starts with its intake and stops with it."""

    worker: Worker
    intake: StreamIntake | None = None
    timers: LocalTimers | None = None  # the sleeps it fires itself
    extra: list[Task] = field(default_factory=list)

    async def run(self, stop: asyncio.Event) -> None:
        await self.worker.run(stop, extra=self.extra)


def build_worker(
    *,
    db: Database,
    settings: Settings,
    handler: Handler,
    redis: Any = None,
    keys: Keys | None = None,
    streams: bool | None = None,
    concurrency: int | None = None,
    llm: LLMClient | None = None,
    notifier: Notifier | None = None,
    worker_id: str | None = None,
    touch: Toucher | None = None,
    loops: Sequence[LoopSpec] = (),
    routes: Routes = ALL,
) -> WorkerParts:
    """One worker. With ``redis`` (and ``keys``) it takes work from the work streams: the
    stream intake and its reclaim loop are built with it. ``streams`` is the worker's mode
    (polling backs off for the intake), by default whether ``redis`` is given; a streams
    worker without ``redis`` is one for :meth:`Worker.run_until_idle`. ``loops``: background
    loops that this worker also runs, over every project, stopped with its intake. ``routes``:
    the runs it serves (awooop.runs.routing; every run by default)."""
    if redis is not None and keys is None:
        raise ValueError("a stream intake needs the stream keys")
    worker = Worker(
        db=db,
        settings=settings,
        handler=handler,
        concurrency=concurrency,
        worker_id=worker_id,
        llm=llm,
        notifier=notifier,
        streams=redis is not None if streams is None else streams,
        touch=touch,
        routes=routes,
    )
    timers = LocalTimers(worker, settings)
    worker.executor.sleeping = timers.hold
    parts = WorkerParts(worker, timers=timers, extra=[timers.run])
    if redis is not None and worker.streams:
        assert keys is not None
        intake = StreamIntake(worker, redis, keys, settings, timers)
        parts.intake = intake
        parts.extra += [intake.run, functools.partial(run_loop, intake.reclaim_spec())]
    if loops:
        parts.extra.append(
            functools.partial(
                run_loops,
                list(loops),
                projects=project_source(db),
                grace_s=settings.shutdown_grace_s,
            )
        )
    return parts


@asynccontextmanager
async def worker_process(
    services: Services, stop: asyncio.Event | None = None
) -> AsyncIterator[ModelGateway]:
    """The process-wide parts of a worker process: loop heartbeats in Postgres and the model
    gateway, started (waiting while the database is away or full, until ``stop``); both undone
    on exit (the previous heartbeat sink comes back)."""
    previous_sink = set_heartbeat_sink(DatabaseHeartbeats(services.db))
    gateway = ModelGateway(services)
    try:
        await when_reachable(gateway.start, stop=stop)
        yield gateway
    finally:
        await gateway.close()
        set_heartbeat_sink(previous_sink)
