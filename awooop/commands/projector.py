"""``awooop projector [NAME ...]``: run projector loops (all projector projections by default).

Each projection gets its consumer loop (reads the shard events streams through the group
``projector:<name>``) and its reconcile loop (heals from Postgres what Redis lost). Runs until
SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import Any

from awooop.config import Settings
from awooop.loops import run_loop
from awooop.services import Services
from projections import loops, registry


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "projector", help="run projector loops (read models fed by consumer groups)"
    )
    parser.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="projections to run (default: all of " + ", ".join(registry.projector_names()) + ")",
    )
    parser.set_defaults(run=run)


async def run(settings: Settings, args: argparse.Namespace) -> int:
    names = args.names or registry.projector_names()
    for name in names:
        registry.get(name)  # E-PROJECTION-001 before anything starts
    services = await Services.open(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        specs = loops.projector_loops(services, names)
        await asyncio.gather(*(run_loop(spec, stop) for spec in specs))
    finally:
        await services.close()
    return 0
