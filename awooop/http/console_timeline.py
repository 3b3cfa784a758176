"""The run page's timeline as sections and groups: pure, over the run's timeline lines.

Each attempt is a section (the events before the first claim are attempt 0), named with the
handler version its claim recorded; within it,
consecutive events of one type form a group, which the page folds (``<details>``) when it
holds :data:`FOLD_AT` or more. Each row carries the time since the run's previous event
(whatever the filter hides). The filter keeps the event types named in the URL
(``?events=StepCompleted,ModelCalled``, or one ``events`` field per type as the page's form
sends them); names that are no run event type are ignored. At most :data:`MAX_ROWS` rows are
drawn, the newest; the others are counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from awooop.projections.run_state import RUN_TYPES
from awooop.projections.timeline import TimelineLine, attempts

FOLD_AT = 3
MAX_ROWS = 1000
UNFOLD_ALL_BELOW = 60  # a timeline this short shows every section open


@dataclass(frozen=True)
class Row:
    line: TimelineLine
    since_ms: float | None  # since the run's previous event; None for its first


@dataclass
class Group:
    event_type: str
    rows: list[Row] = field(default_factory=list)

    @property
    def span_ms(self) -> float:
        return (self.rows[-1].line.at - self.rows[0].line.at).total_seconds() * 1000


@dataclass
class Section:
    attempt: int
    groups: list[Group] = field(default_factory=list)
    events: int = 0
    workers: list[str] = field(default_factory=list)
    open: bool = False
    version: str | None = None  # the handler version its claim recorded (RunClaimed)

    @property
    def span_ms(self) -> float:
        first, last = self.groups[0].rows[0].line.at, self.groups[-1].rows[-1].line.at
        return (last - first).total_seconds() * 1000


@dataclass(frozen=True)
class TimelineView:
    sections: list[Section]
    total: int  # events of the run
    matching: int  # of them, kept by the filter
    left_out: int  # matching ones not drawn (past MAX_ROWS)
    types: list[str]  # the event types of the run, for the filter's boxes
    selected: frozenset[str] | None  # None: no filter

    @property
    def version(self) -> int:
        """The version of the newest row drawn (0: none)."""
        if not self.sections:
            return 0
        return self.sections[-1].groups[-1].rows[-1].line.version


def event_filter(values: Iterable[str]) -> frozenset[str] | None:
    """Pure: the event types named by the ``events`` fields (each may list several, comma
    separated); None when none names a run event type (no filter)."""
    names = {n.strip() for v in values for n in v.split(",")}
    known = frozenset(names & RUN_TYPES)
    return known or None


def when_ms(moment: datetime) -> str:
    """Pure: a time to the millisecond, in UTC and saying so."""
    shown = moment if moment.tzinfo is None else moment.astimezone(UTC)
    return shown.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def view(
    lines: Sequence[TimelineLine],
    selected: frozenset[str] | None = None,
    *,
    max_rows: int = MAX_ROWS,
) -> TimelineView:
    """Pure: the sections of ``lines`` (oldest first) kept by ``selected``."""
    rows: list[Row] = []
    previous: datetime | None = None
    for ln in lines:
        since = None if previous is None else (ln.at - previous).total_seconds() * 1000
        previous = ln.at
        if selected is None or ln.event_type in selected:
            rows.append(Row(ln, since))
    matching = len(rows)
    drawn = rows[-max_rows:] if max_rows > 0 else []
    sections: list[Section] = []
    versions = {a.attempt: a.handler_version for a in attempts(lines)}  # whatever the filter
    for row in drawn:
        ln = row.line
        if not sections or sections[-1].attempt != ln.attempt:
            sections.append(Section(attempt=ln.attempt, version=versions.get(ln.attempt)))
        section = sections[-1]
        if not section.groups or section.groups[-1].event_type != ln.event_type:
            section.groups.append(Group(ln.event_type))
        section.groups[-1].rows.append(row)
        section.events += 1
        if ln.worker_id and ln.worker_id not in section.workers:
            section.workers.append(ln.worker_id)
    for i, section in enumerate(sections):
        section.open = i == len(sections) - 1 or len(drawn) < UNFOLD_ALL_BELOW
    return TimelineView(
        sections=sections,
        total=len(lines),
        matching=matching,
        left_out=matching - len(drawn),
        types=sorted({ln.event_type for ln in lines}),
        selected=selected,
    )
