"""``awooop relay``: publish committed events and contract notices to Redis Streams.

Runs the ``relay`` loop (with its heartbeat row in ``awooop_loop_heartbeats``, as in every
layout) until SIGTERM or SIGINT, then stops cleanly (releases the relay lease so
that a standby takes over at once) and exits 0. Several may run: one is active, the others
wait. Serves ``/metrics`` on ``AWOOOP_METRICS_PORT`` when set.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import Any

from awooop.core.config import Settings
from awooop.core.logs import get_logger
from awooop.core.loop_heartbeats import DatabaseHeartbeats
from awooop.core.loops import run_loop
from awooop.core.process import EVENT_LOOP, settle_heap
from awooop.core.telemetry import configure_tracing, serve_metrics, shutdown_tracing
from awooop.loops.relay import relay_spec
from awooop.services import Services, redis_client
from awooop.streams.keys import Keys
from awooop.streams.relay import Relay

log = get_logger(__name__)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "relay", help="publish the event log and contract outbox to Redis Streams"
    )
    parser.set_defaults(run=run, loop_factory=EVENT_LOOP)


async def run(settings: Settings, args: argparse.Namespace) -> int:
    # The relay opens its own connections for its work; these services (one connection) check
    # the schema at start and while it runs, as every process does.
    services = await Services.open_when_reachable(settings, db_pool_size=1, kind="relay")
    configure_tracing("awooop-relay")
    serve_metrics(settings.metrics_port)
    redis = redis_client(settings.redis_url, settings.redis_socket_timeout_s)
    relay = Relay(
        settings=settings,
        redis=redis,
        keys=Keys(settings.redis_key_prefix, settings.shard_count),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    settle_heap()
    log.info("relay_starting", relay_id=relay.relay_id, metrics_port=settings.metrics_port)
    try:
        # Its heartbeat row (`awooop loops list`, doctor) as in every other layout.
        await run_loop(relay_spec(relay, settings), stop, heartbeat=DatabaseHeartbeats(services.db))
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await relay.close()
        await redis.aclose()
        await services.close()
        shutdown_tracing()
    log.info("relay_stopped", relay_id=relay.relay_id)
    return 0
