"""The run page's waterfall: where a run's time went, as bars on one time axis.

Pure: folded from the run's timeline lines (:func:`awooop.projections.timeline.timeline_lines`, the
same read as the page's timeline) and the database clock. One bar per

- **attempt**: its ``RunClaimed`` to the event that ends it (``ApprovalRequested`` gives the
  lease back; ``RunCompleted``, ``RunFailed``, ``RunRequeued``, ``LeaseReleased``,
  ``RunCancelled``, or the next claim);
- **step**: a ``StepCompleted`` from its ``started_at`` when the event carries one, else from
  the attempt's previous event (the step ran at most since then);
- **model call**: a ``ModelCalled``'s ``started_at`` and ``duration_ms``;
- **approval wait**: ``ApprovalRequested`` to its decision (granted, rejected, expired) or the
  run's end; a durable **wait** likewise, ``WaitStarted`` to ``TimerFired`` or
  ``SignalDelivered`` or ``ChildrenFinished`` (labelled by its step: ``sleep:1``,
  ``event:paid:1``, ``children:1``);
- **tool wait**: ``ToolWaitStarted`` to ``ToolResultReceived`` or the attempt's end.

A bar still open (a running attempt, an open approval) reaches the database clock ("now") and
is marked running; on a finished run it stops at the run's last event. Positions are
percentages of the axis (the template sets ``left`` and ``width``; no script). The work is
bounded for runs of thousands of events: one pass over the lines, the steps, model calls and
tool waits of an attempt beyond :data:`PER_ATTEMPT` are drawn as groups of consecutive ones,
and at most :data:`MAX_BARS` bars are drawn, the newest (the others are counted).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from awooop.projections.timeline import TimelineLine

PER_ATTEMPT = 40  # bars of one kind in one attempt before they are grouped
MAX_BARS = 300
MIN_WIDTH = 0.3  # percent: an instant still shows as a sliver

ATTEMPT_ENDS = frozenset(
    {
        "ApprovalRequested",
        "WaitStarted",
        "RunCompleted",
        "RunFailed",
        "RunRequeued",
        "LeaseReleased",
        "RunCancelled",
    }
)
DECISIONS = {
    "ApprovalGranted": "granted",
    "ApprovalRejected": "rejected",
    "ApprovalExpired": "expired",
    "TimerFired": "fired",  # a durable wait's ends (a sleep's, an event wait's timeout)
    "SignalDelivered": "signal",
    "ChildrenFinished": "children",  # a wait for child runs, ended by its children
}
RUN_ENDS = frozenset({"RunCompleted", "RunFailed", "RunCancelled"})
GROUPED = ("step", "model", "tool")


@dataclass(frozen=True)
class Bar:
    """One bar: ``kind`` attempt, step, model, approval or tool; ``outcome`` how it ended
    (the ending event, ``ok`` or an error code, the decision; "" unknown); ``count`` > 1 for a
    group of consecutive bars of one kind."""

    kind: str
    label: str
    attempt: int
    version: int
    start: datetime
    end: datetime
    running: bool = False
    outcome: str = ""
    count: int = 1
    left: float = 0.0
    width: float = 0.0

    @property
    def duration_ms(self) -> float:
        return max((self.end - self.start).total_seconds() * 1000, 0.0)


@dataclass(frozen=True)
class Waterfall:
    start: datetime
    end: datetime
    bars: list[Bar]
    omitted: int  # bars past MAX_BARS, not drawn
    ticks: list[tuple[float, str]]  # (percent, offset from the start)

    @property
    def duration_ms(self) -> float:
        return (self.end - self.start).total_seconds() * 1000


def duration_text(ms: float) -> str:
    """Pure: a duration as people read it: ``850 ms``, ``12.3 s``, ``4 min 05 s``,
    ``2 h 03 min``."""
    if ms < 1000:
        return f"{ms:.0f} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def instant(value: object) -> datetime | None:
    """Pure: a time from a timeline line's detail (ISO text, as the event's builtins hold it)."""
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def bars_of(lines: Sequence[TimelineLine], open_end: datetime, running: bool) -> list[Bar]:
    """Pure: the bars of a run's lines (oldest first), in the order they start; an open bar
    ends at ``open_end`` and is ``running`` as given."""
    bars: list[Bar] = []
    attempt: Bar | None = None
    approval: Bar | None = None
    tools: dict[str, Bar] = {}
    previous_in_attempt: datetime | None = None

    def close_tools(at: datetime, outcome: str) -> None:
        for tool in tools.values():
            bars.append(replace(tool, end=at, outcome=outcome))
        tools.clear()

    for ln in lines:
        kind = ln.event_type
        if kind == "RunClaimed" or (attempt is not None and kind in ATTEMPT_ENDS):
            if attempt is not None:
                close_tools(ln.at, kind)
                bars.append(replace(attempt, end=ln.at, outcome=kind))
                attempt = None
            if kind == "RunClaimed":
                attempt = Bar(
                    "attempt", f"attempt {ln.attempt}", ln.attempt, ln.version, ln.at, ln.at
                )
        if kind == "StepCompleted":
            started = instant(ln.detail.get("started_at")) or previous_in_attempt or ln.at
            step = str(ln.detail.get("step", "step"))
            bars.append(Bar("step", step, ln.attempt, ln.version, min(started, ln.at), ln.at))
        elif kind == "ModelCalled":
            started = instant(ln.detail.get("started_at")) or ln.at
            took = ln.detail.get("duration_ms")
            ms = float(took) if isinstance(took, int | float) else 0.0
            name = str(ln.detail.get("model") or ln.detail.get("contract_id") or "model")
            outcome = str(ln.detail.get("outcome", ""))
            end = started + timedelta(milliseconds=ms)
            bars.append(Bar("model", name, ln.attempt, ln.version, started, end, outcome=outcome))
        elif kind == "ToolWaitStarted":
            tool = str(ln.detail.get("tool", "tool"))
            tools[tool] = Bar("tool", tool, ln.attempt, ln.version, ln.at, ln.at)
        elif kind == "ToolResultReceived":
            opened = tools.pop(str(ln.detail.get("tool", "tool")), None)
            if opened is not None:
                bars.append(replace(opened, end=ln.at, outcome="received"))
        elif kind in ("ApprovalRequested", "WaitStarted"):
            what = "approval" if kind == "ApprovalRequested" else "wait"
            label = str(ln.detail.get("step", what))
            approval = Bar(what, label, ln.attempt, ln.version, ln.at, ln.at)
        elif approval is not None and (kind in DECISIONS or kind in RUN_ENDS):
            bars.append(replace(approval, end=ln.at, outcome=DECISIONS.get(kind, kind)))
            approval = None
        previous_in_attempt = ln.at if attempt is not None else None
    for opened in [attempt, approval, *tools.values()]:
        if opened is not None:
            bars.append(replace(opened, end=max(open_end, opened.start), running=running))
    bars.sort(key=lambda b: (b.start, b.kind != "attempt", b.version))
    return bars


def grouped(bars: Sequence[Bar], per_attempt: int = PER_ATTEMPT) -> list[Bar]:
    """Pure: ``bars`` with each attempt's steps, model calls and tool waits beyond
    ``per_attempt`` of a kind drawn as at most ``per_attempt`` groups of consecutive ones."""
    counts: dict[tuple[int, str], int] = {}
    for b in bars:
        counts[(b.attempt, b.kind)] = counts.get((b.attempt, b.kind), 0) + 1
    out: list[Bar] = []
    open_groups: dict[tuple[int, str], tuple[Bar, int]] = {}
    for b in bars:
        key = (b.attempt, b.kind)
        if b.kind not in GROUPED or counts[key] <= per_attempt:
            out.append(b)
            continue
        size = math.ceil(counts[key] / per_attempt)
        found = open_groups.get(key)
        if found is None:
            open_groups[key] = (b, len(out))
            out.append(b)
            continue
        first, index = found
        merged = replace(
            first,
            label=f"{first.label.split(' … ')[0]} … {b.label}",
            end=max(first.end, b.end),
            count=first.count + 1,
            running=first.running or b.running,
            outcome=b.outcome if b.outcome not in ("", "ok") else first.outcome,
        )
        out[index] = merged
        if merged.count >= size:
            del open_groups[key]
        else:
            open_groups[key] = (merged, index)
    return out


def ticks(total_ms: float, count: int = 4) -> list[tuple[float, str]]:
    """Pure: ``count`` + 1 evenly spaced marks of an axis ``total_ms`` long, as offsets from
    its start."""
    return [(100 * i / count, "+" + duration_text(total_ms * i / count)) for i in range(count + 1)]


def waterfall(
    lines: Sequence[TimelineLine],
    now: datetime,
    *,
    finished: bool,
    in_step: tuple[str, datetime] | None = None,
    max_bars: int = MAX_BARS,
) -> Waterfall | None:
    """Pure: the waterfall of a run's lines at the database clock ``now``; ``finished``: the
    run is in a final state (open bars stop at its last event); ``in_step``: the step the
    running attempt reported and its start, drawn as a running bar. None for a run with no
    line."""
    if not lines:
        return None
    open_end = lines[-1].at if finished else max(now, lines[-1].at)
    bars = grouped(bars_of(lines, open_end, running=not finished))
    if in_step is not None and not finished:
        name, started = in_step
        attempt = max((ln.attempt or 0 for ln in lines), default=0)
        current = Bar("step", name, attempt, lines[-1].version, min(started, open_end), open_end)
        bars.append(replace(current, running=True))
    omitted = max(len(bars) - max_bars, 0)
    bars = bars[-max_bars:] if max_bars > 0 else []
    start = min([lines[0].at, *(b.start for b in bars)])
    end = max([open_end, *(b.end for b in bars)])
    total = max((end - start).total_seconds() * 1000, 1.0)
    placed = []
    for b in bars:
        width = min(max(b.duration_ms / total * 100, MIN_WIDTH), 100.0)
        left = min((b.start - start).total_seconds() * 1000 / total * 100, 100 - width)
        placed.append(replace(b, left=round(left, 3), width=round(width, 3)))
    return Waterfall(start=start, end=end, bars=placed, omitted=omitted, ticks=ticks(total))
