"""Which phase each migration belongs to, and what applying the pending ones does to a running
fleet. Pure: no I/O.

Every schema change ships as expand, then contract (docs/operations.md, Upgrading):

- ``expand``: only adds (tables, nullable columns, indexes, functions, rows). The previous
  release's processes keep running on it, so it is applied while they run.
- ``contract``: removes or changes what an earlier release's code uses. It raises the schema
  floor (``UPDATE awooop_schema_floor SET oldest_release = '<file>'``) in its own transaction,
  so processes of releases older than the floor refuse to start, and running ones stop at
  their next schema check. It is applied only once no live process runs such a release.

A file declares its phase in a header line ``-- phase: expand`` or ``-- phase: contract``.
Files released before phases were declared (up to :data:`FIRST_DECLARED`) count as expand: each
was judged when it shipped (docs/schema-changes.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from awooop.core.errors import MigrationPhaseError

# Files before this one were released before phase headers existed.
FIRST_DECLARED = "0121"
PHASE_LINE = re.compile(r"^\s*--\s*phase:\s*(\S+)\s*$", re.MULTILINE)
FLOOR_RAISE = re.compile(
    r"UPDATE\s+awooop_schema_floor\s+SET\s+oldest_release\s*=\s*'([^']+)'", re.IGNORECASE
)


class Phase(StrEnum):
    EXPAND = "expand"
    CONTRACT = "contract"


@dataclass(frozen=True)
class Step:
    """One pending migration file as ``awooop migrate`` will apply it."""

    name: str
    phase: Phase
    floor: str | None  # the release a contract step makes the oldest that may run


@dataclass(frozen=True)
class LiveProcess:
    instance: str
    kind: str
    host: str
    pid: int
    release: str  # the newest migration file the process's release ships


@dataclass(frozen=True)
class Plan:
    """What ``awooop migrate`` would do now: the steps it applies, the contract step it holds
    back (and every step after it), and the live processes that step would stop."""

    apply: list[Step]
    held: list[Step]
    stopped_by_held: list[LiveProcess]

    @property
    def breaks_fleet(self) -> bool:
        return bool(self.stopped_by_held)


def step_of(name: str, sql: str) -> Step:
    """The file's declared phase; raise E-MIGRATE-004 when a file after :data:`FIRST_DECLARED`
    declares none, an unknown one, or a phase its statements contradict."""
    declared = PHASE_LINE.findall(sql)
    floors = FLOOR_RAISE.findall(sql)
    if name < FIRST_DECLARED and not declared:
        floor = floors[-1] if floors else None
        return Step(name, Phase.CONTRACT if floors else Phase.EXPAND, floor)
    if len(declared) != 1 or declared[0] not in Phase.__members__.values():
        raise MigrationPhaseError(
            f"migration {name} must declare its phase in one header line: "
            "'-- phase: expand' or '-- phase: contract'"
        )
    phase = Phase(declared[0])
    if phase is Phase.EXPAND and floors:
        raise MigrationPhaseError(
            f"migration {name} raises the schema floor: declare it '-- phase: contract'"
        )
    if phase is Phase.CONTRACT and (len(floors) != 1 or floors[0] > name):
        raise MigrationPhaseError(
            f"contract migration {name} must raise the schema floor once (one UPDATE of "
            "awooop_schema_floor.oldest_release), to this file's name or an earlier release's"
        )
    return Step(name, phase, floors[0] if floors else None)


def plan(steps: Sequence[Step], live: Iterable[LiveProcess], *, expand_only: bool) -> Plan:
    """Apply the pending steps in order up to the first contract step that ``expand_only``
    excludes or that would stop a live process; hold back that step and every later one (a
    later expand step may rely on the contract before it)."""
    processes = list(live)
    for index, step in enumerate(steps):
        if step.phase is not Phase.CONTRACT:
            continue
        stopped = [p for p in processes if step.floor is not None and p.release < step.floor]
        if expand_only or stopped:
            return Plan(list(steps[:index]), list(steps[index:]), stopped)
    return Plan(list(steps), [], [])


__all__ = ["FIRST_DECLARED", "LiveProcess", "Phase", "Plan", "Step", "plan", "step_of"]
