"""``awooop doctor [--json]``: health checks with fixes; exit 0 only when nothing FAILs."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import msgspec

from awooop.commands.doctor_checks import exit_code, run_checks, without_postgres
from awooop.commands.doctor_results import Check
from awooop.core.config import Settings
from awooop.core.errors import DatabaseUnavailableError
from awooop.core.retries import CONNECTION_ERRORS
from awooop.services import Services, redis_client

DESCRIPTION = """\
Check the deployment the way an operator would at 3 a.m. and print one line per check:
OK, WARN or FAIL, what was found, and (for WARN/FAIL) the fix with the runbook entry to read.
Checks: Postgres and Redis reachable, migrations applied and unchanged, tenant isolation,
the login role, consumer groups and their lag, outbox lag, expired leases, approvals near
expiry, timers past due (sleeps and event waits the timers loop has not resumed), dead
letters, and background loops (stopped: no heartbeat; failing: heartbeats with errors).
A store that does not answer is reported as unreachable and the checks that need it as
"not checked". Exit status: 0 when nothing FAILs, 1 otherwise."""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "doctor",
        help="check the deployment; OK/WARN/FAIL with fixes",
        description=DESCRIPTION,
    )
    parser.add_argument(
        "--json", action="store_true", help="one JSON list of {name, status, detail, fix}"
    )
    parser.set_defaults(run=run)


async def run(settings: Settings, args: argparse.Namespace) -> int:
    cannot_connect: tuple[type[BaseException], ...] = (
        *CONNECTION_ERRORS,
        DatabaseUnavailableError,
    )
    try:
        services = await Services.open(settings, db_pool_size=2)
    except cannot_connect as exc:
        client = redis_client(settings.redis_url, settings.redis_socket_timeout_s)
        try:
            results = await without_postgres(client, exc)
        finally:
            await client.aclose()
    else:
        try:
            results = await run_checks(services)
        finally:
            await services.close()
    write(results, as_json=args.json)
    return exit_code(results)


def write(results: list[Check], *, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(msgspec.json.encode(results).decode() + "\n")
        return
    width = max(len(c.name) for c in results)
    for c in results:
        fix = f"  -> {c.fix}" if c.fix and c.status != "OK" else ""
        print(f"{c.status:<5} {c.name:<{width}}  {c.detail}{fix}")
