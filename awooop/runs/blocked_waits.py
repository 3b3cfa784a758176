"""``blocked_on`` of a WAITING_EVENT run (:mod:`awooop.runs.blocked`): asleep until its due
time (``sleeping``), waiting for a signal (``waiting_for_event``: its name, its timeout), or
for its child runs (``waiting_for_children``: how many of how many have finished, how many it
needs). Pure, from the run's open wait (``awooop_run_waits``, read with the run's other
facts)."""

from __future__ import annotations

from datetime import datetime

import msgspec

from awooop.runs.blocked_reasons import Reason


class WaitFacts(msgspec.Struct, frozen=True, kw_only=True):
    kind: str  # "sleep", "event" or "children"
    name: str | None = None
    due_at: datetime | None = None  # a sleep's due time, an event wait's timeout (None: none)
    # A wait for child runs: how many of them must finish, how many it waits for, how many
    # have finished.
    needed: int | None = None
    children: int = 0
    finished: int = 0


def _at(moment: datetime | None) -> str:
    return "-" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%SZ")


def describe_wait(
    wait: WaitFacts | None, now: datetime, ref: str
) -> tuple[Reason, str, str, datetime | None]:
    """Pure: (reason, summary, next action, until) of a run waiting for ``wait``."""
    cancel = f"awooop runs cancel {ref} to stop it"
    if wait is None or wait.kind == "sleep":
        due = None if wait is None else wait.due_at
        late = due is not None and due < now
        summary = f"sleeps until {_at(due)}" + (
            " (due: the timers loop resumes it)" if late else ""
        )
        action = "none: it resumes when due (check awooop loops list for the timers loop)"
        return Reason.SLEEPING, summary, f"{action}; {cancel}", due
    if wait.kind == "children":
        return describe_children(wait, ref, cancel)
    timeout = "no timeout" if wait.due_at is None else f"times out at {_at(wait.due_at)}"
    summary = f"waits for event {wait.name} ({timeout})"
    action = f"awooop runs signal {ref} {wait.name} --payload JSON --key KEY; {cancel}"
    return Reason.WAITING_FOR_EVENT, summary, action, wait.due_at


def describe_children(
    wait: WaitFacts, ref: str, cancel: str
) -> tuple[Reason, str, str, datetime | None]:
    """Pure: the ``waiting_for_children`` reason of a wait for child runs."""
    needs = "" if wait.needed in (None, wait.children) else f", needs {wait.needed}"
    timeout = "no timeout" if wait.due_at is None else f"times out at {_at(wait.due_at)}"
    summary = (
        f"waits for child runs: {wait.finished} of {wait.children} children finished"
        f"{needs} ({timeout})"
    )
    action = (
        f"none: it resumes when enough children have finished (awooop runs show {ref} lists "
        f"them); {cancel} (its children with it)"
    )
    return Reason.WAITING_FOR_CHILDREN, summary, action, wait.due_at
