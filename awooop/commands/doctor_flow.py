"""Doctor checks of what moves: consumer groups, the outbox, leases, approvals, what live
runs are blocked on, dead letters and the background loops."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from redis.exceptions import ResponseError

from awooop.commands.doctor_results import FAIL, OK, WARN, Check, one, text
from awooop.core.loop_heartbeats import LOOP_STALE_INTERVALS, MIN_WRITE_INTERVAL_S, stale_after_s
from awooop.eventlog import deadletters, partitions, queries
from awooop.eventlog import dedupe_windows as windows
from awooop.runs.blocked import Reason
from awooop.runs.blocked_facts import count_by_reason
from awooop.services import Services
from awooop.streams.keys import WORKER_GROUP

OUTBOX_WARN_S, OUTBOX_FAIL_S = 5.0, 60.0
APPROVAL_SOON_S = 120.0
PARTITIONS_FAIL, PARTITIONS_WARN = timedelta(days=2), timedelta(days=7)
# Ingest claims the next dedupe window too: it is refused a window before the newest one ends.
WINDOWS_FAIL, WINDOWS_WARN = windows.WIDTH + timedelta(days=2), windows.WIDTH + timedelta(days=6)
ARCHIVE_LATE = timedelta(days=2)

# --- SQL -----------------------------------------------------------------------------------
EVENTS_LAG = """
SELECT extract(epoch FROM now() - min(e.recorded_at)) AS age, count(*) AS n
FROM awooop_events e, awooop_relay_cursor c
WHERE c.name = 'events' AND (e.tx_id, e.position) > (c.tx_id::text::xid8, c.position)
"""
CONTRACT_LAG = """
SELECT extract(epoch FROM now() - min(created_at)) AS age, count(*) AS n
FROM awooop_contract_outbox WHERE delivered_at IS NULL
"""
# A lease runs out with the run's own lease_until or with its worker's session (migration
# 0161), whichever comes first: the rule's own text.
LEASE = queries.fragment("run_lease_until")
EXPIRED_LEASES = f"""
SELECT count(*) AS n, extract(epoch FROM now() - min({LEASE})) AS overdue
FROM awooop_run_state AS r
WHERE r.status IN ('RUNNING', 'WAITING_TOOL') AND {LEASE} < now()
"""  # noqa: S608 - constant text: the lease rule is written once
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
WHERE coalesce(last_success_at, updated_at) < now() - make_interval(secs => interval_s * $1 + $2)
ORDER BY 1, 2
"""


async def consumer_groups(services: Services) -> list[Check]:
    checks = []
    for shard in services.keys.shards():
        stream = services.keys.work_stream(shard)
        try:
            groups = await services.redis.xinfo_groups(stream)
        except ResponseError:  # Redis answered: no such stream (nothing published there yet)
            groups = []
        names = {text(g["name"]) for g in groups}
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
                    f"group {stream} {text(g['name'])}",
                    status,
                    f"lag {lag}, pending {pending}",
                    "add workers (alert ConsumerGroupLagHigh)" if status == WARN else "",
                )
            )
    return checks


async def outbox(services: Services) -> list[Check]:
    async with services.db.platform() as conn:
        rows = {
            "events": await one(conn, EVENTS_LAG),
            "contract": await one(conn, CONTRACT_LAG),
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
        row = await one(conn, EXPIRED_LEASES)
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
        row = await one(conn, APPROVALS, APPROVAL_SOON_S)
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


def blocked_check(counts: dict[tuple[str, str], int]) -> Check:
    """Pure: the ``blocked runs`` line from runs per (project, blocked_on reason): FAIL when
    runs wait on a shard that no worker reads, for a contract that no live worker serves or for
    a handler version that none runs, WARN when a live run's message is
    dead-lettered, else OK with the live reasons counted (and the projects with paused runs)."""
    by_reason: dict[str, int] = {}
    projects: dict[str, set[str]] = {}
    for (project, reason), n in counts.items():
        if n:
            by_reason[reason] = by_reason.get(reason, 0) + n
            projects.setdefault(reason, set()).add(project)
    live = ", ".join(
        f"{by_reason[r.value]} {r.value}"
        for r in Reason
        if r.value in by_reason and r not in (Reason.FAILED, Reason.FAILED_DEAD_LETTERED)
    )
    unread = by_reason.get(Reason.PENDING_NO_WORKER, 0)
    if unread:
        names = ", ".join(sorted(projects[Reason.PENDING_NO_WORKER]))
        return Check(
            "blocked runs",
            FAIL,
            f"{unread} run(s) wait on a shard no worker reads (projects {names}); {live}",
            "start `awooop worker` processes; `awooop runs list --project P` shows each run's "
            "blocked_on (runbook: A run waits)",
        )
    unserved = by_reason.get(Reason.NO_WORKER_FOR_CONTRACT, 0)
    if unserved:
        names = ", ".join(sorted(projects[Reason.NO_WORKER_FOR_CONTRACT]))
        return Check(
            "blocked runs",
            FAIL,
            f"{unserved} run(s) wait for a contract no live worker serves (projects {names}); "
            f"{live}",
            "start `awooop worker --contract C` for it; `awooop runs list --project P` shows "
            "each run's contract in its blocked_on (workers: Routing runs to workers)",
        )
    stale = by_reason.get(Reason.NO_WORKER_FOR_VERSION, 0)
    if stale:
        names = ", ".join(sorted(projects[Reason.NO_WORKER_FOR_VERSION]))
        return Check(
            "blocked runs",
            FAIL,
            f"{stale} run(s) wait for a handler version no live worker runs (projects {names}); "
            f"{live}",
            "start workers of an accepted version (`--handler-version V`) or accept another: "
            "`awooop projects required-versions` (workers: Changing a handler safely)",
        )
    stranded = by_reason.get(Reason.PENDING_DEAD_LETTERED, 0)
    if stranded:
        return Check(
            "blocked runs",
            WARN,
            f"{stranded} live run(s) whose work message is dead-lettered; {live}",
            "`awooop deadletters list`, then `awooop deadletters redrive ID` (runbook: Dead "
            "letters)",
        )
    paused = projects.get(Reason.PAUSED)
    held = f"; paused: {', '.join(sorted(paused))} (awooop projects pauses)" if paused else ""
    return Check("blocked runs", OK, (live or "no live run") + held)


async def blocked(services: Services) -> list[Check]:
    async with services.db.platform() as conn:
        counts = await count_by_reason(
            conn, services.redis, services.keys, services.settings.lease_ttl_s
        )
    return [blocked_check(counts)]


async def dead_letters(services: Services) -> list[Check]:
    async with services.db.platform() as conn:
        total = sum((await deadletters.open_counts(conn)).values())
    if total:
        return [
            Check(
                "dead letters",
                WARN,
                f"{total} open dead letters",
                "`awooop deadletters list`, fix the cause, `awooop deadletters redrive` "
                "(runbook: Dead letters)",
            )
        ]
    return [Check("dead letters", OK, "none")]


async def loops(services: Services) -> list[Check]:
    async with services.db.platform() as conn:
        stale = await conn.fetch(STALE_LOOPS, LOOP_STALE_INTERVALS, MIN_WRITE_INTERVAL_S)
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
    if float(row["heartbeat_age"]) <= stale_after_s(cycle):
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


def partition_check(
    parts: list[partitions.Partition],
    now: datetime,
    retention: timedelta,
    archiving: bool,
) -> Check:
    """Pure: the verdict on the log's partitions (coverage ahead, an archive that is late)."""
    until = partitions.covered_until(parts)
    fix = (
        "run the log_partitions loop (`awooop loops run`, `awooop loops list`), or once: "
        "SELECT awooop_ensure_log_partitions(now(), now() + interval '14 days', 7)"
    )
    if until is None or until - now < PARTITIONS_FAIL:
        return Check(
            "log partitions",
            FAIL,
            f"writes after {until or now:%Y-%m-%d %H:%M} will be refused",
            fix,
        )
    if until - now < PARTITIONS_WARN:
        return Check("log partitions", WARN, f"partitions end on {until:%Y-%m-%d}", fix)
    due = partitions.due_for_archive(parts, now, retention + ARCHIVE_LATE)
    if archiving and due is not None:
        return Check(
            "log partitions",
            WARN,
            f"{due.name} is due for the archive since {due.range_to + retention:%Y-%m-%d}",
            "read the log_archive_refused log lines of the log_partitions loop: a live run or a "
            "follower behind holds it (docs/operations.md, The log's archive)",
        )
    oldest = min(p.range_from for p in parts)
    return Check(
        "log partitions",
        OK,
        f"{len(parts)} partitions from {oldest:%Y-%m-%d} to {until:%Y-%m-%d}",
    )


def dedupe_window_check(parts: list[windows.Window], now: datetime) -> Check:
    """Pure: the verdict on the dedupe table's windows (how far ahead they reach)."""
    until = windows.covered_until(parts)
    fix = (
        "run the dedupe_expiry loop (`awooop loops run`, `awooop loops list`), or once as the "
        "tables' owner: SELECT awooop_ensure_dedupe_partitions(now(), now() + interval '14 days')"
    )
    if until is None or until - now < WINDOWS_FAIL:
        refused = (until - windows.WIDTH) if until is not None else now
        return Check("dedupe windows", FAIL, f"ingest after {refused:%Y-%m-%d %H:%M} fails", fix)
    if until - now < WINDOWS_WARN:
        return Check("dedupe windows", WARN, f"windows end on {until:%Y-%m-%d}", fix)
    oldest = min(p.range_from for p in parts)
    return Check(
        "dedupe windows", OK, f"{len(parts)} windows from {oldest:%Y-%m-%d} to {until:%Y-%m-%d}"
    )


async def dedupe_windows(services: Services) -> list[Check]:
    async with services.db.platform() as conn:
        now = await conn.fetchval(windows.NOW)
        parts = await windows.windows(conn)
    return [dedupe_window_check(parts, now)]


async def log_partitions(services: Services) -> list[Check]:
    settings = services.settings
    async with services.db.platform() as conn:
        now = await conn.fetchval(partitions.NOW)
        parts = await partitions.partitions(conn)
    retention = timedelta(days=settings.log_retention_days)
    return [partition_check(parts, now, retention, bool(settings.log_archive_dir))]
