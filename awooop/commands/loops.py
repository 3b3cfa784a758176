"""``awooop loops list`` and ``awooop loops run [NAME ...]`` (R-40, R-42).

``list`` prints every loop of the registry (:mod:`awooop.loops.registry`) with its category,
project, interval and last run, read from ``awooop_loop_heartbeats`` so it works from any
process; a per-tenant loop gets one line per project of ``awooop_projects``; loops that other
processes run (heartbeats of names not in the registry) are listed too. ``STATE`` is now:
``ok``, ``failing`` (its process reports, the last iterations raised), ``stopped`` (no
heartbeat for ``LOOP_STALE_INTERVALS`` cycles: the process is gone or frozen) or ``never ran``;
``LAST ERROR`` is history, with its age: a healthy loop may show an old one.

``run`` runs the named loops (all by default) in this process until SIGTERM or SIGINT, serving
``/metrics`` on ``AWOOOP_METRICS_PORT`` (or ``--metrics-port``); on the signal each loop
finishes its current iteration (up to ``AWOOOP_SHUTDOWN_GRACE_S``) and the process exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from awooop.commands.output import add_wide, table
from awooop.core.config import Settings
from awooop.core.errors import UnknownLoopError
from awooop.core.logs import get_logger
from awooop.core.loop_heartbeats import (
    DatabaseHeartbeats,
    HeartbeatRow,
    project_source,
    read_heartbeats,
    stale_after_s,
)
from awooop.core.loops import LoopSpec, run_loops, set_heartbeat_sink
from awooop.core.process import EVENT_LOOP
from awooop.core.telemetry import start_observability
from awooop.loops.registry import all_loops
from awooop.services import Services

log = get_logger(__name__)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "loops", help="list or run the background loops", description=__doc__
    )
    sub = parser.add_subparsers(dest="loops_command", required=True, metavar="ACTION")
    listing = sub.add_parser(
        "list",
        help="every loop with its state, last run and last error",
        description="Every registered loop (and loops other processes report) with category, "
        "project, cycle, STATE (ok, failing, stopped, never ran), last success, failures in a "
        "row, the process (host:pid) and the last error with its age. Reads Postgres only.",
    )
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    add_wide(listing)
    listing.set_defaults(run=list_loops)
    running = sub.add_parser(
        "run",
        help="run loops (all by default) until SIGTERM/SIGINT",
        description="Run the named background loops (default: every registered loop: relay, "
        "reaper, reclaim, approval expiry, dedupe expiry, stats, projectors ...) in this "
        "process until SIGTERM or SIGINT; each loop then finishes its iteration (up to "
        "AWOOOP_SHUTDOWN_GRACE_S) and the process exits 0. Serves /metrics on "
        "AWOOOP_METRICS_PORT (or --metrics-port) and reports heartbeats that `awooop loops "
        "list` and `awooop doctor` read. Several copies are safe (leaders by lease).",
    )
    running.add_argument("names", nargs="*", metavar="NAME", help="loops to run (default: all)")
    running.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="NAME",
        help="a loop not to run here (repeatable), e.g. --skip relay where `awooop relay` "
        "processes run apart",
    )
    running.add_argument(
        "--metrics-port", type=int, default=None, help="override AWOOOP_METRICS_PORT"
    )
    running.set_defaults(run=run, loop_factory=EVENT_LOOP)


# --- list -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Line:
    loop: str
    category: str
    project_id: str
    interval_s: float
    last_run: str
    failures: int
    last_error: str
    where: str
    state: str = "never ran"
    last_error_at: str = ""


def ago(then: datetime | None, now: datetime) -> str:
    """Pure: '3s ago', '4m12s ago', '2h05m ago', 'never'."""
    if then is None:
        return "never"
    seconds = max(0, int((now - then).total_seconds()))
    if seconds < 60:
        return f"{seconds}s ago"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s ago"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m ago"


def loop_state(beat: HeartbeatRow, now: datetime) -> str:
    """Pure: what the loop is doing now (``doctor`` judges the same way): ``stopped`` when its
    process has not reported for ``LOOP_STALE_INTERVALS`` cycles (plus the heartbeat write
    throttle: :func:`awooop.core.loop_heartbeats.stale_after_s`), else ``failing`` while its last
    iterations raised, else ``ok``. An old ``last_error`` does not make it failing."""
    if (now - beat.updated_at).total_seconds() > stale_after_s(beat.interval_s):
        return "stopped"
    return "failing" if beat.consecutive_failures else "ok"


def listing(
    specs: list[LoopSpec], projects: list[str], beats: list[HeartbeatRow], now: datetime
) -> list[Line]:
    """Pure: the lines of ``loops list``."""
    by_key = {(b.loop_name, b.project_id): b for b in beats}
    lines: list[Line] = []
    seen: set[tuple[str, str]] = set()

    def line(name: str, category: str, project: str, interval_s: float) -> Line:
        beat = by_key.get((name, project))
        seen.add((name, project))
        if beat is None:
            return Line(name, category, project, interval_s, "never", 0, "", "")
        return Line(
            name,
            category,
            project,
            interval_s,
            ago(beat.last_success_at, now),
            beat.consecutive_failures,
            beat.last_error or "",
            f"{beat.host}:{beat.pid}",
            state=loop_state(beat, now),
            last_error_at=ago(beat.last_failure_at, now) if beat.last_error else "",
        )

    for spec in specs:
        if spec.is_template:
            instances = projects or ["(no project yet)"]
            for project in instances:
                lines.append(line(spec.name, str(spec.category), project, spec.cycle_s))
        else:
            lines.append(
                line(spec.name, str(spec.category), spec.resolved_project_id(), spec.cycle_s)
            )
    for beat in beats:  # loops that run inside other processes (workers, relay, ...)
        if (beat.loop_name, beat.project_id) not in seen:
            lines.append(line(beat.loop_name, beat.category, beat.project_id, beat.interval_s))
    return lines


def render(lines: list[Line], *, wide: bool = False) -> str:
    header = (
        "LOOP",
        "CATEGORY",
        "PROJECT",
        "INTERVAL",
        "STATE",
        "LAST RUN",
        "FAILING",
        "WHERE",
        "LAST ERROR",
    )
    rows = [
        (
            ln.loop,
            ln.category,
            ln.project_id,
            f"{ln.interval_s:g}s",
            ln.state,
            ln.last_run,
            str(ln.failures) if ln.failures else "",
            ln.where,
            f"({ln.last_error_at}) {ln.last_error}" if ln.last_error else "",
        )
        for ln in lines
    ]
    return table(header, rows, wide=wide)


async def list_loops(settings: Settings, args: argparse.Namespace) -> int:
    services = await Services.open(settings, db_pool_size=2)
    try:
        specs = all_loops(services)
        beats = await read_heartbeats(services.db)
        projects = await project_source(services.db)()
        async with services.db.platform() as conn:
            now: datetime = await conn.fetchval("SELECT now()")
    finally:
        await services.close()
    lines = listing(specs, projects, beats, now)
    if args.json:
        for ln in lines:
            print(json.dumps(ln.__dict__))
    else:
        print(render(lines, wide=args.wide))
    return 0


# --- run --------------------------------------------------------------------------------------


def select(specs: list[LoopSpec], names: list[str], skip: Sequence[str] = ()) -> list[LoopSpec]:
    """Pure: the specs named (all when ``names`` is empty) less those in ``skip``; an unknown
    name in either is E-LOOP-001."""
    known = {s.name for s in specs}
    unknown = sorted((set(names) | set(skip)) - known)
    if unknown:
        raise UnknownLoopError(
            f"no loop named {', '.join(unknown)}; known loops: {', '.join(sorted(known))}"
        )
    return [s for s in specs if (not names or s.name in set(names)) and s.name not in set(skip)]


async def run(settings: Settings, args: argparse.Namespace) -> int:
    services = await Services.open_when_reachable(settings, kind="loops")
    try:
        specs = select(all_loops(services), args.names, args.skip)
        port = settings.metrics_port if args.metrics_port is None else args.metrics_port
        observability = start_observability("awooop-loops", port)
        previous_sink = set_heartbeat_sink(DatabaseHeartbeats(services.db))
        stop = asyncio.Event()
        event_loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            event_loop.add_signal_handler(sig, stop.set)
        log.info(
            "loops_running",
            loops=[s.name for s in specs],
            metrics_port=observability.metrics.port if observability.metrics else None,
        )
        try:
            await run_loops(
                specs,
                stop,
                projects=project_source(services.db),
                grace_s=settings.shutdown_grace_s,
            )
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                event_loop.remove_signal_handler(sig)
            set_heartbeat_sink(previous_sink)
            observability.close()
        log.info("loops_stopped")
    finally:
        await services.close()
    return 0
