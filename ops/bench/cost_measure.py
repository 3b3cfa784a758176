"""The pure parts of the cost benchmark (``cost.py``): CPU per process from /proc, and the
first hop's breakdown. No I/O beyond reading /proc in :func:`snapshot`; unit-tested in
tests/unit/test_bench_cost.py.

CPU is user + system time (``/proc/PID/stat`` fields 14 and 15, in clock ticks), the same
counters ``getrusage`` and ``top`` read. A process that exits between two snapshots takes its
CPU since the first snapshot with it: :func:`cpu_by_role` counts such processes per role
(``exited``) so that a figure missing a part says so.
"""

from __future__ import annotations

import os
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# A Postgres client backend's process title: "postgres: USER DATABASE HOST(PORT) STATE"
# (TCP) or "... [local] STATE" (Unix socket). Background processes (checkpointer, walwriter,
# autovacuum, ...) have no client address.
_CLIENT_BACKEND = re.compile(r"^postgres: \S+ \S+ (\S+\(\d+\)|\[local\])")


@dataclass(frozen=True)
class Proc:
    ppid: int
    ticks: int  # user + system CPU, clock ticks
    title: str  # the command line, arguments joined by spaces (a Postgres process title)


def parse_stat(text: str) -> tuple[int, int]:
    """(parent pid, user + system ticks) from the text of ``/proc/PID/stat``. The command
    name (field 2) is in parentheses and may hold spaces and parentheses: split after the
    last one."""
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[1]), int(fields[11]) + int(fields[12])


def snapshot() -> dict[int, Proc]:
    """Every process of the machine now (those that vanish while being read are left out)."""
    found: dict[int, Proc] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid, ticks = parse_stat(f.read())
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                title = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError, ValueError):
            continue
        found[int(entry)] = Proc(ppid, ticks, title)
    return found


def machine_ticks() -> tuple[int, int]:
    """(all, idle + iowait) ticks of the whole machine since boot (``/proc/stat``)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return sum(ticks), ticks[3] + ticks[4]


def postgres_role(title: str) -> str:
    """``postgres_backends`` for a client backend (a connection), else ``postgres_other``
    (postmaster, checkpointer, walwriter, autovacuum, ...)."""
    return "postgres_backends" if _CLIENT_BACKEND.match(title) else "postgres_other"


def roles_of(
    procs: Mapping[int, Proc], named: Mapping[int, str], postmaster: int | None
) -> dict[int, str]:
    """The role of each process of interest: ``named`` (pid -> role, e.g. the worker) first,
    then the postmaster and its children by their titles."""
    roles = dict(named)
    for pid, proc in procs.items():
        if pid in roles:
            continue
        if pid == postmaster:
            roles[pid] = "postgres_other"
        elif postmaster is not None and proc.ppid == postmaster:
            roles[pid] = postgres_role(proc.title)
    return roles


@dataclass(frozen=True)
class CpuSplit:
    seconds: dict[str, float]  # per role
    exited: dict[str, int]  # per role: processes gone before the second snapshot


def cpu_by_role(
    before: Mapping[int, Proc], after: Mapping[int, Proc], roles: Mapping[int, str], tick: int
) -> CpuSplit:
    """CPU seconds per role between two snapshots. A process present in ``after`` only
    started in between (all its CPU counts); one present in ``before`` only exited (its
    CPU after ``before`` is unknown: counted in ``exited``)."""
    seconds: dict[str, float] = {}
    exited: dict[str, int] = {}
    for pid, role in roles.items():
        seconds.setdefault(role, 0.0)
        if pid not in after:
            if pid in before:
                exited[role] = exited.get(role, 0) + 1
            continue
        start = before[pid].ticks if pid in before else 0
        seconds[role] += (after[pid].ticks - start) / tick
    return CpuSplit(seconds, exited)


def percentile(values: Sequence[float], q: float) -> float:
    """The same nearest-rank percentile as the other benchmarks (worker.py)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# The first hop, from the producer's COMMIT to the handler's start, as consecutive points in
# time of one run (unix seconds, one host's clock). Each hop goes from a point to the next.
POINTS = ("committed", "xadd", "delivered", "claim_started", "claim_committed", "handler_started")
HOPS = {
    "relay": ("committed", "xadd"),  # NOTIFY, wake-up, outbox read, XADD
    "xadd_to_xreadgroup": ("xadd", "delivered"),  # Redis hands the entry to blocked readers
    "worker_to_claim": ("delivered", "claim_started"),  # decode, take, group-commit wait
    "claim_commit": ("claim_started", "claim_committed"),  # the claim statement and COMMIT
    "handler_start": ("claim_committed", "handler_started"),  # task, context, handler call
}


def hop_breakdown(runs: Sequence[Mapping[str, float | None]]) -> dict[str, object]:
    """Per hop over the runs that have every point: p50, p99 and mean in ms, and each hop's
    share of the mean total (means add up: the shares sum to 1). ``total`` is committed to
    handler_started."""
    whole = [r for r in runs if all(r.get(p) is not None for p in POINTS)]
    out: dict[str, object] = {"runs": len(whole), "of": len(runs)}
    if not whole:
        return out

    def ms(run: Mapping[str, float | None], a: str, b: str) -> float:
        end, start = run[b], run[a]
        assert end is not None and start is not None  # filtered above
        return (end - start) * 1000

    total = [ms(r, POINTS[0], POINTS[-1]) for r in whole]
    mean_total = statistics.fmean(total)
    hops: dict[str, dict[str, float]] = {}
    for name, (a, b) in HOPS.items():
        values = [ms(r, a, b) for r in whole]
        mean = statistics.fmean(values)
        hops[name] = {
            "p50_ms": round(percentile(values, 0.5), 3),
            "p99_ms": round(percentile(values, 0.99), 3),
            "mean_ms": round(mean, 3),
            "share": round(mean / mean_total, 3) if mean_total else float("nan"),
        }
    out["hops"] = hops
    out["total"] = {
        "p50_ms": round(percentile(total, 0.5), 3),
        "p99_ms": round(percentile(total, 0.99), 3),
        "mean_ms": round(mean_total, 3),
    }
    return out
