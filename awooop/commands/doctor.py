"""``awooop doctor [--json]``: health checks with fixes; exit 0 only when nothing FAILs."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import msgspec

from awooop.config import Settings
from awooop.doctor import exit_code, run_checks
from awooop.services import Services


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("doctor", help="check the deployment; OK/WARN/FAIL with fixes")
    parser.add_argument("--json", action="store_true", help="one JSON document for scripts")
    parser.set_defaults(run=run)


async def run(settings: Settings, args: argparse.Namespace) -> int:
    services = await Services.open(settings, db_pool_size=2)
    try:
        results = await run_checks(services)
    finally:
        await services.close()
    if args.json:
        sys.stdout.write(msgspec.json.encode(results).decode() + "\n")
    else:
        width = max(len(c.name) for c in results)
        for c in results:
            fix = f"  -> {c.fix}" if c.fix and c.status != "OK" else ""
            print(f"{c.status:<5} {c.name:<{width}}  {c.detail}{fix}")
    return exit_code(results)
