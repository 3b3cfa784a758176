"""``awooop demo``: the main job end to end with live output (what ``make demo`` runs)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from awooop.core.config import Settings


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo", help="run every component and a realistic scenario, then print a summary"
    )
    parser.add_argument("--workers", type=int, default=3, help="worker processes (default 3)")
    parser.add_argument("--dir", default=".", help="project folder for .awooop/ state")
    parser.add_argument(
        "--services",
        default="auto",
        choices=("auto", "local", "docker", "embedded"),
        help="where Postgres and Redis come from (default auto: configured or local services, "
        "then Docker, then embedded private servers)",
    )
    parser.set_defaults(run=run)


async def run(settings: Settings, args: argparse.Namespace) -> int:
    from awooop.demo.provision import provision

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request is noise here
    from awooop.demo.scenario import Demo
    from awooop.demo.stage import say

    with ExitStack() as stack:
        project_dir = await asyncio.to_thread(lambda: Path(args.dir).resolve())
        where = await asyncio.to_thread(provision, stack, project_dir, args.services)
        demo = Demo(where, project_dir, workers=args.workers)
        main = asyncio.current_task()
        assert main is not None
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, main.cancel)
        loop.add_signal_handler(signal.SIGTERM, main.cancel)
        try:
            ok = await demo.run()
        except asyncio.CancelledError:
            say("interrupted: stopping every process")
            await demo.close()
            return 130
        except Exception as exc:
            say(f"demo failed: {exc}")
            await demo.close()
            return 1
        await demo.close()
        return 0 if ok else 1
