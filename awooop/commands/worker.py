"""``awooop worker``: a worker process (R-11 to R-16).

    awooop worker --handler package.module:function [--concurrency N] [--no-streams]
                  [--with-loops] [--burst] [--approval-notifier package.module:function]
                  [--contract C ...] [--project P ...] [--handler-version V]

Runs until SIGTERM or SIGINT, then shuts down gracefully (in-flight runs get
``AWOOOP_SHUTDOWN_GRACE_S`` to finish, the rest hand their leases back) and exits 0.
``--with-loops`` also runs the registered background loops in this process (reaper, approval
expiry, ...; handy for a single-process demo; several copies are safe). ``--burst`` runs
what is runnable now through the polling path and exits (tests, one-shot jobs).
The handler's module is imported with the current directory first on ``sys.path`` (as
``python -m`` does): ``--handler triage:handle`` finds ``triage.py`` in the folder the worker
starts in; elsewhere, the module's folder must be on ``PYTHONPATH``.
``--contract`` (repeated) takes only runs of those contracts, ``--project`` (repeated) only runs
of those projects (awooop.runs.routing); without them the worker serves every run.
``--handler-version`` (else ``AWOOOP_HANDLER_VERSION``) names the code version of the handler,
which each claim records and which a contract's required versions must include; without it the
handler's own ``__awooop_version__`` (on the function or its module), else a digest of its
module's source (awooop.worker.handler_version).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib
import inspect
import os
import signal
import sys
from typing import Any

from awooop.core.config import Settings
from awooop.core.errors import HandlerNotFoundError
from awooop.core.logs import get_logger
from awooop.core.process import EVENT_LOOP, settle_heap
from awooop.core.telemetry import start_observability
from awooop.loops.registry import all_loops
from awooop.runs import leases
from awooop.runs.routing import routes_of
from awooop.services import Services, when_reachable
from awooop.worker.assembly import build_worker, worker_process
from awooop.worker.handler_version import version_of
from awooop.worker.last_writes import FLUSHES_PER_PROJECT

log = get_logger(__name__)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("worker", help="run a worker process")
    parser.add_argument(
        "--handler",
        required=True,
        help="the run handler, package.module:function (async def handle(run) -> result)",
    )
    parser.add_argument(
        "--concurrency", type=int, default=None, help="runs at once (AWOOOP_WORKER_CONCURRENCY)"
    )
    parser.add_argument(
        "--no-streams",
        action="store_true",
        help="take work by polling Postgres only (no Redis work stream)",
    )
    parser.add_argument(
        "--with-loops", action="store_true", help="also run the registered background loops"
    )
    parser.add_argument("--burst", action="store_true", help="run what is runnable now, exit")
    parser.add_argument(
        "--contract",
        action="append",
        default=None,
        help="serve only runs of this contract (repeat for several; default: every contract)",
    )
    parser.add_argument(
        "--project",
        action="append",
        default=None,
        help="serve only runs of this project (repeat for several; default: every project)",
    )
    parser.add_argument(
        "--handler-version",
        default=None,
        help="the handler's code version, recorded on each attempt (AWOOOP_HANDLER_VERSION; "
        "default: its __awooop_version__, else a digest of its module's source)",
    )
    add_approval_notifier(parser)
    parser.set_defaults(run=run, loop_factory=EVENT_LOOP)


def add_approval_notifier(parser: argparse.ArgumentParser) -> None:
    """``--approval-notifier``, the same for ``awooop worker`` and ``awooop up``."""
    parser.add_argument(
        "--approval-notifier",
        default=None,
        help="package.module:function receiving approval tickets (tokens) when the handler "
        "passes no notifier of its own (default: none; the example handler logs them)",
    )


def approval_notifier(args: argparse.Namespace) -> Any:
    """The callable ``--approval-notifier`` names, or None."""
    return load_callable(args.approval_notifier, "notifier") if args.approval_notifier else None


def load_callable(spec: str, what: str = "handler") -> Any:
    """Import ``package.module:function`` and check that it is an async function."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise HandlerNotFoundError(f"{what} {spec!r} must be given as package.module:function")
    search_current_directory()
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise HandlerNotFoundError(cannot_import(module_name, what, exc)) from None
    fn = getattr(module, attr, None)
    if fn is None:
        raise HandlerNotFoundError(f"{what} {spec!r}: {module_name} has no {attr!r}")
    if not inspect.iscoroutinefunction(fn):
        raise HandlerNotFoundError(f"{what} {spec!r} must be an async function")
    return fn


def search_current_directory() -> None:
    """Put the current directory first on ``sys.path``, as ``python -m`` does: the ``awooop``
    script's own ``sys.path`` starts with its ``bin`` folder, so without this a handler module
    next to where the worker was started (``--handler triage:handle``) is not found."""
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)


def cannot_import(module_name: str, what: str, exc: ImportError) -> str:
    """The message for a handler module that cannot be imported: where Python looked, and
    what to do, when it is the module itself that is missing (not one it imports)."""
    message = f"{what} module {module_name!r} cannot be imported: {exc}"
    missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
    if missing is None or not (module_name + ".").startswith(missing + "."):
        return message
    top = module_name.split(".")[0]
    return (
        f"{message}. The module must be importable by the worker's Python: start the worker"
        f" in the folder that holds {top}.py (or the package folder {top}/), or add that folder"
        f" to PYTHONPATH. Current directory: {os.getcwd()}; sys.path starts with"
        f" {sys.path[:4]}"
    )


async def run(settings: Settings, args: argparse.Namespace) -> int:
    handler = load_callable(args.handler)
    notifier = approval_notifier(args)
    given = args.handler_version
    if given is None:
        given = settings.handler_version or None  # the setting's "" is "not given"
    version = version_of(handler, given)
    routes = routes_of(args.contract, args.project, version)
    if args.concurrency is not None and args.concurrency < 1:
        raise HandlerNotFoundError("--concurrency must be a positive integer")
    concurrency = args.concurrency or settings.worker_concurrency
    size = pool_size(concurrency, settings.db_pool_size)
    # Open the connections that the parallel claim and write flushes use before the first
    # run arrives: opened lazily, the first runs after a start each waited for a connection
    # (connect, role, codecs: tens of ms; the benchmark's first second had p99 ~90 ms).
    flushes = min(size, FLUSHES_PER_PROJECT)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    services = await Services.open_when_reachable(
        settings,
        db_pool_size=size,
        db_run_min=flushes,
        stop=stop,
        kind="worker",
        serves=routes.params,
    )
    if services is None:  # stopped while waiting for the database
        return 0
    observability = start_observability("awooop-worker", settings.metrics_port)
    try:
        # ... and prepare the statements each of them will run (the first second's slow claims).
        statements = leases.RunStatements(services.db)
        await when_reachable(functools.partial(statements.prepare, flushes), stop=stop)
        async with worker_process(services, stop) as gateway:
            parts = build_worker(
                db=services.db,
                settings=settings,
                handler=handler,
                concurrency=concurrency,
                llm=gateway,
                notifier=notifier,
                streams=not args.no_streams,
                # A burst takes work by polling only: no intake to build.
                redis=None if args.burst else services.redis,
                keys=services.keys,
                loops=all_loops(services) if args.with_loops and not args.burst else (),
                routes=routes,
            )
            worker = parts.worker
            if args.burst:
                for sig in (signal.SIGTERM, signal.SIGINT):  # a burst stops the default way
                    loop.remove_signal_handler(sig)
                count = await worker.run_until_idle(max_s=3600)
                print(f"ran {count} attempt(s)")
                return 0
            settle_heap()
            print(f"worker {worker.worker_id} started", flush=True)
            log.info("worker_routes", worker_id=worker.worker_id, serves=routes.describe())
            await parts.run(stop)
            return 0
    finally:
        observability.close()
        await services.close()


def pool_size(concurrency: int, configured: int = 0) -> int:
    """Connections per role pool: ``configured`` (``AWOOOP_DB_POOL_SIZE``) or, when that is 0,
    from the concurrency: group commit needs few; keep the total modest."""
    return configured or max(2, min(10, concurrency // 4 + 1))


def worker_connections(settings: Settings, concurrency: int) -> int:
    """The most Postgres connections one worker process opens: its three role pools (tenant,
    platform, run), the cancel LISTEN connection and the pointer-check connections."""
    return (
        3 * pool_size(concurrency, settings.db_pool_size) + 1 + settings.pointer_check_connections
    )
