"""What the demo observed, and the summary it ends with (each check passed or not)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Summary:
    accepted: int = 0
    duplicates: int = 0
    runs: set[str] = field(default_factory=set)
    recovery_s: float | None = None
    journal_ok: bool | None = None
    notice_ms: float | None = None
    switch_s: float | None = None
    stale_calls: int | None = None
    approved: str | None = None
    expired: str | None = None
    triage: dict[str, str] = field(default_factory=dict)  # what each triage run did
    triage_problems: list[str] | None = None  # None: the phase did not get to its checks
    orders: str | None = None  # what the orders example's phase saw
    orders_problems: list[str] | None = None  # None: the phase did not get to its checks
    orders_skipped: str | None = None  # why the phase did not run (psycopg not installed)
    verify_exit: int | None = None
    doctor_exit: int | None = None
    states: dict[str, int] = field(default_factory=dict)
    max_completions: int | None = None
    traces: list[tuple[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def report(s: Summary) -> bool:
    """Print the summary; True when every check passed or was skipped (None)."""
    checks: dict[str, bool | None] = {
        "every run terminal": set(s.states) <= {"COMPLETED", "FAILED", "CANCELLED"},
        "no run completed twice": (s.max_completions or 0) <= 1,
        "crashed run recovered, journaled steps not repeated": bool(s.journal_ok),
        "no model call on the old policy after the switch": s.stale_calls == 0,
        "approved run completed": s.approved == "COMPLETED",
        "unapproved run expired with E-APPROVAL-002": s.expired == "FAILED E-APPROVAL-002",
        "the triage agent: approval, a signal and a timeout, three child runs, a durable sleep, "
        "streamed output": s.triage_problems == [],
        "orders from a psycopg service: retries no-ops, a rollback leaves nothing, "
        "the projection equals the totals, replay --verify clean": (
            None if s.orders_skipped else s.orders_problems == []
        ),
        "replay verify found no difference": s.verify_exit == 0,
        "awooop doctor found nothing failing": s.doctor_exit == 0,
        "no unexpected HTTP answer": not s.problems,
    }
    print("\n=== AwoooP demo summary ===")
    print("runs by state:      " + ", ".join(f"{k} {v}" for k, v in sorted(s.states.items())))
    print(
        f"deliveries:         {s.accepted} accepted, {s.duplicates} duplicates refused "
        "(E-IDEMPOTENT-001)"
    )
    print(
        f"crash recovery:     {s.recovery_s:.1f} s from SIGKILL to the new lease"
        if s.recovery_s is not None
        else "crash recovery:     -"
    )
    print(
        f"revision switch:    first call on v2 {s.switch_s:.3f} s after activation"
        if s.switch_s is not None
        else "revision switch:    -"
    )
    for name, seen in s.triage.items():
        print(f"triage ({name:<8}):  {seen}")
    print(f"orders:             {s.orders_skipped or s.orders or '-'}")
    print(f"replay verify:      exit {s.verify_exit}")
    print(f"doctor:             exit {s.doctor_exit}")
    for channel, trace_id in s.traces:
        print(f"trace ({channel:<12}) {trace_id}  (look it up in Tempo)")
    for name, ok in checks.items():
        print(f"  [{'skipped' if ok is None else 'ok' if ok else 'FAIL'}] {name}")
    for problem in [*s.problems, *(s.triage_problems or []), *(s.orders_problems or [])]:
        print(f"  problem: {problem}")
    return all(ok is not False for ok in checks.values())
