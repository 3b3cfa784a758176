"""``awooop doctor``: what an operator checks at 3 a.m., each line OK, WARN or FAIL with a fix.

Every check is one small function that reads (never writes) Postgres or Redis as the platform
role and returns :class:`Check` results. ``run_checks`` runs them all; a check that raises
reports FAIL with the error instead of stopping the others.

During an outage the output names the cause once and points the right way:

- A store that does not answer is **unreachable** (the ``postgres`` or ``redis`` line FAILs
  with the error), and every check that needs it says "not checked" instead of reading the
  outage as a missing stream, group or table.
- A missing consumer group is reported only when Redis answered that the stream or group does
  not exist.
- A loop is **stopped** when its process stopped reporting heartbeats (start that process) and
  **failing** when its process still reports but its iterations raise (read the error; the
  process runs).

The fix texts name the runbook entry (README "Operations runbook", docs/operations.md
"Alerts") the operator should read next.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from awooop.core.migrate import discover
from awooop.core.retries import CONNECTION_ERRORS
from awooop.services import Services
from streams.keys import WORKER_GROUP

OK, WARN, FAIL = "OK", "WARN", "FAIL"
OUTBOX_WARN_S, OUTBOX_FAIL_S = 5.0, 60.0
LOOP_STALE_INTERVALS = 5
APPROVAL_SOON_S = 120.0
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

# --- SQL -----------------------------------------------------------------------------------
APPLIED = "SELECT name, checksum FROM awooop_schema_migrations"
RUNTIME_ROLES = ("awooop_app", "awooop_platform", "awooop_producer")
ROLES = "SELECT rolname FROM pg_roles WHERE rolname = ANY($1::text[])"
LOGIN_ROLE = """
SELECT rolname, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = session_user
"""
TENANT_TABLES = """
SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind = 'r'
  AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid
              AND a.attname = 'project_id' AND NOT a.attisdropped)
ORDER BY 1
"""
EVENTS_LAG = """
SELECT extract(epoch FROM now() - min(e.recorded_at)) AS age, count(*) AS n
FROM awooop_events e, awooop_relay_cursor c
WHERE c.name = 'events' AND (e.tx_id, e.position) > (c.tx_id::text::xid8, c.position)
"""
CONTRACT_LAG = """
SELECT extract(epoch FROM now() - min(created_at)) AS age, count(*) AS n
FROM awooop_contract_outbox WHERE delivered_at IS NULL
"""
EXPIRED_LEASES = """
SELECT count(*) AS n, extract(epoch FROM now() - min(lease_until)) AS overdue
FROM awooop_run_state
WHERE status IN ('RUNNING', 'WAITING_TOOL') AND lease_until < now()
"""
APPROVALS = """
SELECT count(*) FILTER (WHERE approval_expires_at < now()) AS expired,
       count(*) FILTER (WHERE approval_expires_at >= now()
                        AND approval_expires_at < now() + make_interval(secs => $1)) AS soon
FROM awooop_run_state WHERE status = 'WAITING_APPROVAL'
"""
STALE_LOOPS = """
SELECT loop_name, project_id, interval_s, host, pid, consecutive_failures, last_error,
       extract(epoch FROM now() - coalesce(last_success_at, updated_at)) AS age,
       extract(epoch FROM now() - updated_at) AS heartbeat_age
FROM awooop_loop_heartbeats
WHERE coalesce(last_success_at, updated_at) < now() - make_interval(secs => interval_s * $1)
ORDER BY 1, 2
"""


class Check(msgspec.Struct, frozen=True):
    name: str
    status: str
    detail: str
    fix: str = ""


CheckFn = Callable[[Services], Awaitable[list[Check]]]


def unreachable(store: str, exc: BaseException) -> Check:
    """Pure: the FAIL line of a store that did not answer."""
    fix = POSTGRES_FIX if store == "postgres" else REDIS_FIX
    return Check(store, FAIL, f"unreachable: {_describe(exc)}", fix)


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


async def migrations(services: Services) -> list[Check]:
    async with services.db.platform() as conn:
        applied = {r["name"]: r["checksum"] for r in await conn.fetch(APPLIED)}
    files = discover()
    missing = [m.name for m in files if m.name not in applied]
    changed = [m.name for m in files if m.name in applied and applied[m.name] != m.checksum]
    if changed:
        return [
            Check(
                "migrations",
                FAIL,
                f"applied files changed: {', '.join(changed)}",
                "restore the applied files; put changes in a new migration",
            )
        ]
    if missing:
        return [
            Check("migrations", FAIL, f"not applied: {', '.join(missing)}", "run `awooop migrate`")
        ]
    return [Check("migrations", OK, f"{len(files)} applied, checksums unchanged")]


async def tenancy(services: Services) -> list[Check]:
    async with services.db.platform() as conn:
        roles = {r["rolname"] for r in await conn.fetch(ROLES, list(RUNTIME_ROLES))}
        tables = await conn.fetch(TENANT_TABLES)
    loose = [t["relname"] for t in tables if not (t["relrowsecurity"] and t["relforcerowsecurity"])]
    if len(roles) < len(RUNTIME_ROLES) or loose:
        return [
            Check(
                "tenancy",
                FAIL,
                f"roles {sorted(roles)}; tables without forced RLS: {loose or 'none'}",
                "run `awooop migrate`; new tables need awooop_enforce_tenant_isolation()",
            )
        ]
    return [Check("tenancy", OK, f"roles present, RLS forced on {len(tables)} tables")]


async def login_role(services: Services) -> list[Check]:
    """Isolation holds through SET ROLE on every connection; a login role that is a superuser
    or bypasses RLS could leave it (RESET ROLE), so production should not log in as one."""
    async with services.db.platform() as conn:
        row = await conn.fetchrow(LOGIN_ROLE)
    assert row is not None  # session_user is a role
    name = row["rolname"]
    powers = [
        p
        for p, held in (("superuser", row["rolsuper"]), ("BYPASSRLS", row["rolbypassrls"]))
        if held
    ]
    if powers:
        return [
            Check(
                "login role",
                WARN,
                f"{name} is {' and '.join(powers)}: RESET ROLE would leave tenant isolation",
                "log in as a role that is only a member of awooop_app and awooop_platform "
                "(docs/operations.md, Tenant isolation)",
            )
        ]
    return [Check("login role", OK, f"{name}: no superuser, no BYPASSRLS")]


async def consumer_groups(services: Services) -> list[Check]:
    checks = []
    for shard in services.keys.shards():
        stream = services.keys.work_stream(shard)
        try:
            groups = await services.redis.xinfo_groups(stream)
        except ResponseError:  # Redis answered: no such stream (nothing published there yet)
            groups = []
        names = {_text(g["name"]) for g in groups}
        if WORKER_GROUP not in names:
            checks.append(
                Check(
                    f"group {stream}",
                    FAIL,
                    f"group {WORKER_GROUP!r} missing (Redis answered: no such stream or group)",
                    "start the relay (`awooop relay`, `awooop loops run` or `awooop up`): it "
                    "recreates streams and groups (runbook: Redis was wiped or restarted)",
                )
            )
            continue
        for g in groups:
            lag, pending = g.get("lag") or 0, g.get("pending") or 0
            status = WARN if lag > 1000 else OK
            checks.append(
                Check(
                    f"group {stream} {_text(g['name'])}",
                    status,
                    f"lag {lag}, pending {pending}",
                    "add workers (alert ConsumerGroupLagHigh)" if status == WARN else "",
                )
            )
    return checks


async def outbox(services: Services) -> list[Check]:
    async with services.db.platform() as conn:
        rows = {
            "events": await _one(conn, EVENTS_LAG),
            "contract": await _one(conn, CONTRACT_LAG),
        }
    checks = []
    for name, row in rows.items():
        age = float(row["age"] or 0.0)
        status = FAIL if age > OUTBOX_FAIL_S else WARN if age > OUTBOX_WARN_S else OK
        checks.append(
            Check(
                f"outbox {name}",
                status,
                f"{row['n']} undelivered, oldest {age:.1f} s",
                ""
                if status == OK
                else "is a relay running and leading (`awooop loops list`, row relay of "
                "awooop_leaders)? a long transaction holding it back? (runbook: The relay is "
                "stuck; alerts OutboxLagHigh/OutboxLagCritical)",
            )
        )
    return checks


async def leases(services: Services) -> list[Check]:
    async with services.db.platform() as conn:
        row = await _one(conn, EXPIRED_LEASES)
    n, overdue = row["n"], float(row["overdue"] or 0.0)
    if n == 0:
        return [Check("leases", OK, "no RUNNING run with an expired lease")]
    grace = 2 * services.settings.reaper_interval_s
    status = FAIL if overdue > grace else WARN
    return [
        Check(
            "leases",
            status,
            f"{n} RUNNING run(s) with an expired lease (oldest {overdue:.0f} s past)",
            "is the reaper loop running (`awooop loops list`)? (alert RunsStuck)",
        )
    ]


async def approvals(services: Services) -> list[Check]:
    async with services.db.platform() as conn:
        row = await _one(conn, APPROVALS, APPROVAL_SOON_S)
    if row["expired"]:
        return [
            Check(
                "approvals",
                FAIL,
                f"{row['expired']} approval(s) past expiry, unresolved",
                "is the approval expiry loop running (`awooop loops list`)? (alert RunsStuck)",
            )
        ]
    if row["soon"]:
        return [
            Check(
                "approvals",
                WARN,
                f"{row['soon']} approval(s) expire within {APPROVAL_SOON_S:.0f} s",
                "decide them: `awooop runs approve|reject`",
            )
        ]
    return [Check("approvals", OK, "no approval close to expiry")]


async def dead_letters(services: Services) -> list[Check]:
    total = 0
    for shard in services.keys.shards():
        total += await services.redis.xlen(services.keys.dead_letter_stream(shard))
    if total:
        return [
            Check(
                "dead letters",
                WARN,
                f"{total} entries in dead-letter streams",
                "`awooop deadletters list`, fix the cause, `awooop deadletters redrive` "
                "(runbook: Dead letters)",
            )
        ]
    return [Check("dead letters", OK, "none")]


async def loops(services: Services) -> list[Check]:
    async with services.db.platform() as conn:
        stale = await conn.fetch(STALE_LOOPS, LOOP_STALE_INTERVALS)
    if not stale:
        return [Check("loops", OK, f"every loop ran within {LOOP_STALE_INTERVALS} cycles")]
    return [
        Check(f"loop {r['loop_name']}/{r['project_id']}", FAIL, *loop_problem(dict(r)))
        for r in stale
    ]


def loop_problem(row: dict[str, Any]) -> tuple[str, str]:
    """Pure: (detail, fix) of a loop without a recent success. Its process still reporting
    heartbeats (within ``LOOP_STALE_INTERVALS`` cycles) means the loop runs and FAILS; no
    heartbeat means the process hosting it is STOPPED (or frozen)."""
    where = f"{row['host']} pid {row['pid']}"
    cycle = float(row["interval_s"])
    if float(row["heartbeat_age"]) <= cycle * LOOP_STALE_INTERVALS:
        error = row["last_error"] or "?"
        return (
            f"failing: {row['consecutive_failures']} failed iterations in a row, last success "
            f"{row['age']:.1f} s ago (cycle {cycle:g} s), running in {where}; "
            f"last error: {error[:200]}",
            "the process runs: read its `loop_iteration_failed` logs (the error above, its "
            "trace_id) and fix the cause (alert BackgroundLoopFailing)",
        )
    return (
        f"stopped: no heartbeat for {row['heartbeat_age']:.1f} s (cycle {cycle:g} s), "
        f"last seen in {where}",
        "start the process that hosts it (`awooop loops run`, `awooop up`, or the relay/"
        "projector/worker --with-loops that ran it); a frozen process: restart it "
        "(alert BackgroundLoopStale)",
    )


CHECKS: tuple[CheckFn, ...] = (
    postgres,
    redis,
    migrations,
    tenancy,
    login_role,
    consumer_groups,
    outbox,
    leases,
    approvals,
    dead_letters,
    loops,
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
                Check(check.__name__, FAIL, _describe(exc), "see the error in the detail")
            )
    return results


def exit_code(results: list[Check]) -> int:
    return 1 if any(c.status == FAIL for c in results) else 0


async def _one(conn: Any, query: str, *args: Any) -> Any:
    """The single row of an aggregate query (aggregates always return one)."""
    row = await conn.fetchrow(query, *args)
    assert row is not None
    return row


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 300 else text[:297] + "..."


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
