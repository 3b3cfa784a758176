"""``awooop projector [NAME ...]``: run projector loops (every projector projection by default).

Each projection gets its consumer loop (the shard events streams through the group
``projector:<name>``) and its reconcile loop (heals from Postgres what Redis lost); see
:mod:`awooop.loops.projector`. The services' projections (the ``awooop.projections`` entry
points, ``AWOOOP_PROJECTIONS``, ``--projection module:object``) run beside the built-in ones,
once their tables pass the start checks (docs/consumers.md). Runs until SIGTERM or SIGINT,
lets each loop finish its iteration (up to ``AWOOOP_SHUTDOWN_GRACE_S``) and exits 0. Serves
``/metrics`` on ``AWOOOP_METRICS_PORT`` when set. Several projector processes may run: the
consumer group shares the messages between them, and per-stream locks keep the views exact.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import Any

from awooop.core.config import Settings
from awooop.core.logs import get_logger
from awooop.core.loop_heartbeats import DatabaseHeartbeats
from awooop.core.loops import run_loops, set_heartbeat_sink
from awooop.core.process import EVENT_LOOP
from awooop.core.telemetry import start_observability
from awooop.loops import projector as loops
from awooop.projections import registry
from awooop.projections.sources import parse_sources
from awooop.services import Services

log = get_logger(__name__)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "projector", help="run projector loops (read models fed by consumer groups)"
    )
    parser.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="projections to run (default: every registered one, built-in and the services')",
    )
    parser.add_argument(
        "--projection",
        action="append",
        default=[],
        metavar="MODULE:OBJECT",
        help="register a service's projection (repeatable; see docs/consumers.md)",
    )
    parser.set_defaults(run=run, loop_factory=EVENT_LOOP)


async def run(settings: Settings, args: argparse.Namespace) -> int:
    registry.use_sources([*parse_sources(settings.projections), *args.projection])
    names = args.names or registry.projector_names()
    for name in names:
        if registry.get(name).inline:  # E-PROJECTION-001 for unknown names, before anything
            log.warning("projector_inline_projection", projection=name)
    names = [n for n in names if not registry.get(n).inline]
    services = await Services.open_when_reachable(settings, kind="projector")
    try:
        await registry.check_tables(services.db, [registry.get(n) for n in names])
    except BaseException:
        await services.close()
        raise
    observability = start_observability("awooop-projector", settings.metrics_port)
    previous_sink = set_heartbeat_sink(DatabaseHeartbeats(services.db))
    stop = asyncio.Event()
    event_loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        event_loop.add_signal_handler(sig, stop.set)
    log.info("projector_running", projections=names)
    try:
        await run_loops(
            loops.projector_loops(services, names), stop, grace_s=settings.shutdown_grace_s
        )
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            event_loop.remove_signal_handler(sig)
        set_heartbeat_sink(previous_sink)
        observability.close()
        await services.close()
    log.info("projector_stopped", projections=names)
    return 0
