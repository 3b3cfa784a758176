"""Durable waits in the run's journal: pure parts shared by the state machine, the waits table
and the worker (``run.sleep``, ``run.wait_for_event``; docs/workers.md).

A wait is journaled under its step name (``sleep:<n>``, ``event:<name>:<n>``, or the name the
handler gave) in ``saga_steps``, as ``{"attempt", "kind", "due_at", "result": None}`` when it
starts (``WaitStarted``) and with ``"ended"`` when it ends: ``"fired"`` (a sleep's due time came),
``"timeout"`` (an event wait's timeout came), ``"signal"`` (``"result"`` is the signal's
payload) or ``"children"`` (a wait for child runs, ``children:<n>``: ``"result"`` is their
outcomes, :mod:`awooop.eventlog.child_state`). A wait answered at once by a kept signal (or
by children finished already) is an ordinary ``StepCompleted`` (no ``"kind"``). So a replay
finds the due time recorded on first execution (it never sleeps again from scratch) and the
outcome that ended the wait.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from awooop.core.events import ChildrenFinished, SignalDelivered, TimerFired, WaitStarted

SLEEP = "sleep"
EVENT = "event"
CHILDREN = "children"  # a wait for child runs (kind, and how it ended)
FIRED = "fired"
TIMEOUT = "timeout"
SIGNAL = "signal"
# The events that end a wait (WAITING_EVENT -> RESUMED); RunCancelled ends the run instead.
WAIT_ENDINGS = frozenset({"TimerFired", "SignalDelivered", "ChildrenFinished"})


def waiting_for(event: WaitStarted) -> str:
    """Pure: the run's ``waiting_for`` while it waits: ``sleep``, ``event <name>`` or
    ``children``."""
    if event.kind == CHILDREN:
        return CHILDREN
    return SLEEP if event.kind == SLEEP else f"{EVENT} {event.name}"


def journaled(
    steps: Mapping[str, Any], event: WaitStarted | TimerFired | SignalDelivered | ChildrenFinished
) -> dict[str, Any]:
    """Pure: the ``saga_steps`` change of a wait's event (module doc), as state changes."""
    new = dict(steps)
    match event:
        case WaitStarted():
            new[event.step] = {
                "attempt": event.attempt,
                "kind": event.kind,
                "due_at": None if event.due_at is None else event.due_at.isoformat(),
                "result": None,
            }
        case TimerFired():
            entry = dict(new.get(event.step) or {})
            entry["ended"] = FIRED if event.kind == SLEEP else TIMEOUT
            new[event.step] = entry
        case SignalDelivered():
            entry = dict(new.get(event.step) or {})
            entry.update(ended=SIGNAL, result=event.payload, signal_id=str(event.signal_id))
            new[event.step] = entry
        case ChildrenFinished():
            entry = dict(new.get(event.step) or {})
            entry.update(ended=CHILDREN, result=event.results)
            new[event.step] = entry
    return {"saga_steps": new}


def due_of(entry: Mapping[str, Any]) -> datetime | None:
    """Pure: the due time (or timeout) a journaled wait recorded."""
    due = entry.get("due_at")
    return None if due is None else datetime.fromisoformat(due)


def ended(entry: Mapping[str, Any]) -> str | None:
    """Pure: how a journaled wait ended (:data:`FIRED`, :data:`TIMEOUT`, :data:`SIGNAL`), or
    None while it is open; a plain step (a kept signal taken at once) is :data:`SIGNAL`."""
    if "kind" not in entry:
        return SIGNAL
    found = entry.get("ended")
    return None if found is None else str(found)


def contains(payload: Any, match: Any) -> bool:
    """Pure: whether ``payload`` contains ``match`` as Postgres' ``jsonb @>`` decides it
    (objects: every key of ``match`` with a contained value; arrays: every element of
    ``match`` contained in some element; scalars: equal). A wait's ``match`` is an object."""
    if isinstance(match, dict):
        return isinstance(payload, dict) and all(
            k in payload and contains(payload[k], v) for k, v in match.items()
        )
    if isinstance(match, list):
        if not isinstance(payload, list):
            return False
        return all(any(contains(p, m) for p in payload) for m in match)
    if isinstance(payload, bool) or isinstance(match, bool):
        return payload is match
    if isinstance(payload, int | float) and isinstance(match, int | float):
        return payload == match
    return type(payload) is type(match) and payload == match
