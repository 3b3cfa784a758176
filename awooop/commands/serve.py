"""``awooop serve``: the HTTP server (ingest, runs, health, metrics) on uvicorn.

Stack: Starlette on uvicorn with uvloop (event loop) and httptools (HTTP parser), the fastest
pure-Python-deployable ASGI combination that is also the most widely run, with the read
timeouts and JSON refusals of :mod:`awooop.http.server` (why uvicorn: there). One process
serves on one core; ``--workers N`` (AWOOOP_HTTP_WORKERS) starts N server processes that
each bind the same address with SO_REUSEPORT, so the kernel spreads connections across them.
The parent only supervises: SIGTERM/SIGINT are passed on, and when one server process dies
the others are stopped and the command exits 1 (let the service manager restart it). A
server process finishes in-flight requests before it exits.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
from typing import Any

from awooop.core.config import Settings
from awooop.core.logs import get_logger
from awooop.core.process import EVENT_LOOP, cli_command, settle_heap

log = get_logger(__name__)
SERVICE_NAME = "awooop-serve"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve", help="run the HTTP server (channel ingest, runs, /healthz, /readyz, /metrics)"
    )
    parser.add_argument("--host", help="listen address (default AWOOOP_HTTP_HOST)")
    parser.add_argument("--port", type=int, help="listen port (default AWOOOP_HTTP_PORT)")
    parser.add_argument(
        "--workers",
        type=int,
        help="server processes sharing the port with SO_REUSEPORT (default AWOOOP_HTTP_WORKERS)",
    )
    parser.add_argument("--access-log", action="store_true", help="log every request")
    parser.set_defaults(run=run, loop_factory=EVENT_LOOP)


def listen_socket(host: str, port: int, reuse_port: bool) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


async def run(settings: Settings, args: argparse.Namespace) -> int:
    host = args.host or settings.http_host
    port = settings.http_port if args.port is None else args.port
    workers = args.workers or settings.http_workers
    if workers > 1 and not os.environ.get(CHILD_ENV):
        return await supervise(host, port, workers, args.access_log)
    return await serve_one(settings, host, port, bool(os.environ.get(CHILD_ENV)), args.access_log)


CHILD_ENV = "AWOOOP_SERVE_CHILD"


async def serve_one(
    settings: Settings, host: str, port: int, reuse_port: bool, access_log: bool
) -> int:
    # Imported here, not at the top: every `awooop` command imports this module to register.
    from awooop.core.telemetry import configure_tracing, shutdown_tracing
    from awooop.http.app import create_app
    from awooop.http.server import StoppingServer, server_config
    from awooop.services import Services

    configure_tracing(SERVICE_NAME)
    services = await Services.open_when_reachable(
        settings, db_pool_size=settings.http_db_pool_size, kind="serve"
    )
    try:
        app = create_app(services)
        config = server_config(
            app,
            settings,
            access_log=access_log,
            timeout_graceful_shutdown=max(1, round(settings.shutdown_grace_s)),
        )
        server = StoppingServer(config, services.stopping)
        settle_heap()
        sock = listen_socket(host, port, reuse_port)
        # uvicorn re-raises the signal that stopped it once it has shut down; with these
        # handlers in place that ends here with exit code 0 instead of a default kill.
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: None)
        log.info("serve_started", host=host, port=sock.getsockname()[1], pid=os.getpid())
        await server.serve(sockets=[sock])
        sock.close()
    finally:
        await services.close()
        shutdown_tracing()
    log.info("serve_stopped", pid=os.getpid())
    return 0 if server.started else 1


async def supervise(host: str, port: int, workers: int, access_log: bool) -> int:
    argv = [*cli_command(), "serve", "--host", host, "--port", str(port)]
    if access_log:
        argv.append("--access-log")
    env = {**os.environ, CHILD_ENV: "1"}
    children = [await asyncio.create_subprocess_exec(*argv, env=env) for _ in range(workers)]
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    waits = [asyncio.ensure_future(c.wait()) for c in children]
    stop_wait = asyncio.ensure_future(stopping.wait())
    await asyncio.wait([*waits, stop_wait], return_when=asyncio.FIRST_COMPLETED)
    clean = stopping.is_set()
    if not clean:
        log.error("serve_worker_exited", codes=[c.returncode for c in children])
    for child in children:
        if child.returncode is None:
            child.send_signal(signal.SIGTERM)
    codes = await asyncio.gather(*waits)
    stop_wait.cancel()
    return 0 if clean and all(c == 0 for c in codes) else 1
