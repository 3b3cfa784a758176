"""``awooop up [--workers N]``: every component in one process, for small deployments and demos.

The HTTP server (the same app as ``awooop serve``), every registered background loop (the
same specs as ``awooop loops run``: relay, reaper, reclaim, approval expiry, dedupe expiry,
bulk operations, stats, projectors) and N workers (assembled as ``awooop worker`` does,
:func:`build_worker`) share one event loop and one set of pools. SIGTERM/SIGINT stop intake,
let in-flight runs finish within AWOOOP_SHUTDOWN_GRACE_S, stop the loops and the server, and
exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from typing import Any

from awooop.commands.serve import listen_socket
from awooop.commands.worker import (
    add_approval_notifier,
    approval_notifier,
    load_callable,
    pool_size,
)
from awooop.core.config import Settings
from awooop.core.logs import get_logger
from awooop.core.loop_heartbeats import project_source
from awooop.core.loops import run_loops
from awooop.core.process import EVENT_LOOP
from awooop.core.telemetry import start_observability
from awooop.loops.registry import all_loops
from awooop.runs.routing import ALL
from awooop.services import Services
from awooop.worker.assembly import build_worker, worker_process
from awooop.worker.handler_version import versioned

log = get_logger(__name__)
DEFAULT_HANDLER = "awooop.examples.handlers:handle"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "up", help="server, relay, loops, projectors and N workers in one process"
    )
    parser.add_argument(
        "--workers", type=int, default=2, help="workers in this process (default: 2)"
    )
    parser.add_argument(
        "--handler",
        default=DEFAULT_HANDLER,
        help=f"the run handler, package.module:function (default: {DEFAULT_HANDLER})",
    )
    parser.add_argument("--port", type=int, help="HTTP port (default: AWOOOP_HTTP_PORT, 8080)")
    add_approval_notifier(parser)
    parser.set_defaults(run=run, loop_factory=EVENT_LOOP)


async def run(settings: Settings, args: argparse.Namespace) -> int:
    from awooop.http.app import create_app
    from awooop.http.server import StoppingServer, server_config

    handler = load_callable(args.handler)
    routes = versioned(ALL, handler, settings)  # every run, at the handler's version
    notifier = approval_notifier(args)
    if args.workers < 0:
        raise ValueError("--workers must be 0 or more")
    concurrency = settings.worker_concurrency
    services = await Services.open_when_reachable(
        settings,
        db_pool_size=max(settings.http_db_pool_size, pool_size(concurrency) * 2),
        kind="up",
        serves=routes.params,
    )
    observability = start_observability("awooop-up", settings.metrics_port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with worker_process(services, stop) as gateway:
            config = server_config(create_app(services), settings, access_log=False)
            server = StoppingServer(config, services.stopping)
            # uvicorn captures SIGTERM/SIGINT while it serves: it shuts the server down, the
            # "http" task ends, and _until_stopped_or_failed stops everything else.
            port = settings.http_port if args.port is None else args.port
            sock = listen_socket(settings.http_host, port, reuse_port=False)
            tasks = [asyncio.create_task(server.serve(sockets=[sock]), name="http")]
            loops = all_loops(services)
            tasks.append(
                asyncio.create_task(
                    run_loops(
                        loops,
                        stop,
                        projects=project_source(services.db),
                        grace_s=settings.shutdown_grace_s,
                    ),
                    name="loops",
                )
            )
            for n in range(args.workers):
                parts = build_worker(
                    db=services.db,
                    settings=settings,
                    handler=handler,
                    concurrency=concurrency,
                    llm=gateway,
                    redis=services.redis,
                    keys=services.keys,
                    notifier=notifier,
                    routes=routes,
                )
                tasks.append(asyncio.create_task(parts.run(stop), name=f"worker-{n}"))
            print(
                urls(
                    settings.http_host,
                    sock.getsockname()[1],
                    observability.metrics.port if observability.metrics else None,
                )
                + f"\nup: {args.workers} worker(s) and {len(loops)} loop(s)",
                flush=True,
            )
            await _until_stopped_or_failed(stop, tasks)
            server.should_exit = True
            results = await asyncio.gather(*tasks, return_exceptions=True)
            sock.close()
            failures = [r for r in results if isinstance(r, BaseException)]
            for failure in failures:
                log.error("up_component_failed", error=repr(failure))
            return 1 if failures else 0
    finally:
        observability.close()
        await services.close()


def urls(host: str, port: int, metrics_port: int | None) -> str:
    """Pure: where to go, one line each (a wildcard host is reached on localhost)."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host  # noqa: S104 - compared, not bound
    base = f"http://{shown}:{port}"
    metrics = f"http://{shown}:{metrics_port}/metrics" if metrics_port else f"{base}/metrics"
    return (
        f"up: console {base}/ui\n"
        f"up: API     {base}/v1 (routes: docs/reference.md)\n"
        f"up: metrics {metrics}"
    )


async def _until_stopped_or_failed(stop: asyncio.Event, tasks: list[asyncio.Task[Any]]) -> None:
    """Wait for SIGTERM/SIGINT, or for a component to end on its own (then stop the rest)."""
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait([stopper, *tasks], return_when=asyncio.FIRST_COMPLETED)
    stop.set()
    stopper.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await stopper
