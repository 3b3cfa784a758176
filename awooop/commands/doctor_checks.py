"""``awooop doctor``: what an operator checks at 3 a.m., each line OK, WARN or FAIL with a fix.

Every check is one small function that reads (never writes) Postgres or Redis as the platform
role and returns :class:`~awooop.commands.doctor_results.Check` results: the stores' reachability
here, the database's set-up in :mod:`awooop.commands.doctor_schema`, what moves (streams,
outbox, leases, approvals, loops) in :mod:`awooop.commands.doctor_flow`, durable waits in
:mod:`awooop.commands.doctor_timers`. ``run_checks`` runs
them all; a check that raises reports FAIL with the error instead of stopping the others.

During an outage the output names the cause once and points the right way:

- A store that does not answer is **unreachable** (the ``postgres`` or ``redis`` line FAILs
  with the error), and every check that needs it says "not checked" instead of reading the
  outage as a missing stream, group or table.
- A missing consumer group is reported only when Redis answered that the stream or group does
  not exist.
- A loop is **stopped** when its process stopped reporting heartbeats (start that process) and
  **failing** when its process still reports but its iterations raise (read the error; the
  process runs).

The fix texts name the runbook entry (docs/operations.md, "Runbook" and "Situations that page
nothing") the operator should read next.
"""

from __future__ import annotations

import asyncio
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from awooop.commands.doctor_flow import (
    approvals,
    blocked,
    consumer_groups,
    dead_letters,
    dedupe_windows,
    leases,
    log_partitions,
    loops,
    outbox,
)
from awooop.commands.doctor_keys import concurrency_keys
from awooop.commands.doctor_results import FAIL, OK, WARN, Check, CheckFn, describe
from awooop.commands.doctor_schema import fleet, login_role, migrations, tenancy
from awooop.commands.doctor_timers import timers
from awooop.core.retries import CONNECTION_ERRORS
from awooop.services import Services

REACH_TIMEOUT_S = 5.0
# Redis not answering, in the forms redis-py raises it (refused, reset, timed out, DNS).
REDIS_UNREACHABLE: tuple[type[BaseException], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    OSError,
    TimeoutError,
)
POSTGRES_FIX = (
    "start PostgreSQL or fix AWOOOP_DATABASE_URL; ingest answers 503 E-DB-001 meanwhile "
    "(runbook: Postgres failover/restart)"
)
REDIS_FIX = (
    "start Redis or fix AWOOOP_REDIS_URL; ingest goes on, workers poll Postgres, the relay "
    "rebuilds streams and groups once Redis answers (runbook: Redis was wiped or restarted)"
)


def unreachable(store: str, exc: BaseException) -> Check:
    """Pure: the FAIL line of a store that did not answer."""
    fix = POSTGRES_FIX if store == "postgres" else REDIS_FIX
    return Check(store, FAIL, f"unreachable: {describe(exc)}", fix)


async def postgres(services: Services) -> list[Check]:
    try:
        async with asyncio.timeout(REACH_TIMEOUT_S), services.db.platform() as conn:
            version = await conn.fetchval("SHOW server_version")
    except CONNECTION_ERRORS as exc:
        return [unreachable("postgres", exc)]
    return [Check("postgres", OK, f"PostgreSQL {version} reachable")]


async def redis(services: Services) -> list[Check]:
    return [await redis_line(services.redis)]


async def redis_line(client: Any) -> Check:
    try:
        async with asyncio.timeout(REACH_TIMEOUT_S):
            info = await client.info("server")
    except REDIS_UNREACHABLE as exc:
        return unreachable("redis", exc)
    return Check("redis", OK, f"Redis {info.get('redis_version', '?')} reachable")


CHECKS: tuple[CheckFn, ...] = (
    postgres,
    redis,
    migrations,
    fleet,
    tenancy,
    login_role,
    consumer_groups,
    outbox,
    leases,
    concurrency_keys,
    approvals,
    timers,
    blocked,
    dead_letters,
    loops,
    log_partitions,
    dedupe_windows,
)


# Checks that read only Redis (the rest read Postgres): skipped with a pointer to the store's
# own line when that store is unreachable.
REDIS_CHECKS: frozenset[CheckFn] = frozenset({consumer_groups, dead_letters})


def not_checked(check: CheckFn, store: str) -> Check:
    return Check(
        check.__name__.replace("_", " "),
        WARN,
        f"not checked: {store} is unreachable",
        f"see the {store} line",
    )


async def without_postgres(redis_client: Any, exc: BaseException) -> list[Check]:
    """What doctor can say when the database could not even be connected to: that, whether
    Redis answers, and which checks it could not run."""
    results = [unreachable("postgres", exc), await redis_line(redis_client)]
    redis_down = results[1].status == FAIL
    for check in CHECKS:
        if check not in (postgres, redis):
            redis_only = check in REDIS_CHECKS and redis_down
            results.append(not_checked(check, "redis" if redis_only else "postgres"))
    return results


async def run_checks(services: Services) -> list[Check]:
    results: list[Check] = []
    down: set[str] = set()
    for check in CHECKS:
        needs = "redis" if check in REDIS_CHECKS else "postgres"
        if check not in (postgres, redis) and needs in down:
            results.append(not_checked(check, needs))
            continue
        gone = REDIS_UNREACHABLE if needs == "redis" else CONNECTION_ERRORS
        try:
            found = await check(services)
            if check in (postgres, redis) and found[0].status == FAIL:
                down.add(check.__name__)
            results.extend(found)
        except gone as exc:
            # The store went away after its own line said it answered.
            line = unreachable(needs, exc)
            results.append(Check(check.__name__, FAIL, line.detail, line.fix))
        except Exception as exc:
            results.append(
                Check(check.__name__, FAIL, describe(exc), "see the error in the detail")
            )
    return results


def exit_code(results: list[Check]) -> int:
    return 1 if any(c.status == FAIL for c in results) else 0
