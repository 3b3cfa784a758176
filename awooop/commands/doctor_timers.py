"""Doctor check of durable waits: whether the ``timers`` loop keeps up (docs/workers.md,
Durable sleep). A wait past its due time for longer than the loop's poll fallback is late; one
past it by more than two poll intervals + 30 s (``awooop_runs_overdue{reason="timer_due"}``,
alert RunsStuck) means the loop is stopped or behind: its runs sleep on."""

from __future__ import annotations

from awooop.commands.doctor_results import FAIL, OK, WARN, Check, one
from awooop.services import Services

COUNT_CAP = 10000  # past due waits are counted up to this (a bounded read of the due index)

# --- SQL -----------------------------------------------------------------------------------
# The earliest due wait's lateness (one probe of awooop_run_waits_due_idx) and how many are
# past due, and past the grace $1, counted up to $2.
LATE = """
SELECT extract(epoch FROM now() - (SELECT min(due_at) FROM awooop_run_waits
                                   WHERE due_at IS NOT NULL))::float8 AS late,
       (SELECT count(*) FROM (SELECT 1 FROM awooop_run_waits
                              WHERE due_at IS NOT NULL AND due_at < now() LIMIT $2) d) AS due,
       (SELECT count(*) FROM (SELECT 1 FROM awooop_run_waits
                              WHERE due_at IS NOT NULL
                                AND due_at < now() - make_interval(secs => $1)
                              LIMIT $2) o) AS overdue
"""
# ---------------------------------------------------------------------------------------------


async def timers(services: Services) -> list[Check]:
    poll = services.settings.timer_poll_interval_s
    grace = 2 * poll + 30
    async with services.db.platform() as conn:
        row = await one(conn, LATE, grace, COUNT_CAP)
    late = float(row["late"] or 0.0)
    if late <= 0:
        return [Check("timers", OK, "no wait is past its due time")]
    due, overdue = row["due"], row["overdue"]
    counted = f"{due}{'+' if due >= COUNT_CAP else ''} wait(s) past due"
    if late <= poll:
        return [Check("timers", OK, f"{counted}, the earliest {late:.1f} s: firing")]
    status = FAIL if late > grace else WARN
    return [
        Check(
            "timers",
            status,
            f"{counted}, the earliest {late:.0f} s ago"
            + (f"; {overdue} past the grace of {grace:.0f} s" if overdue else ""),
            "is the timers loop running (`awooop loops list`, loop timers) and keeping up "
            "(awooop_timers_overdue_seconds)? its sleeping runs and event waits are not "
            "resumed meanwhile (alert RunsStuck, reason timer_due)",
        )
    ]
