"""What a replay found and did, in numbers and in the lines the CLI prints."""

from __future__ import annotations

from dataclasses import dataclass, field

from awooop.projections.diff import TableDiff


@dataclass
class ReplayReport:
    projection: str
    project: str | None
    bulk_events: int = 0
    tail_events: int = 0  # applied by the commit-safe catch-up after the bulk pass
    snapshot_events: int = 0  # applied in the verify snapshot (rolled back afterwards)
    lock_events: int = 0  # applied under the swap lock
    bulk_seconds: float = 0.0
    rows: dict[str, int] = field(default_factory=dict)
    diffs: list[TableDiff] = field(default_factory=list)
    behind: int = 0  # streams the live view has not caught up with (projectors lag)
    swapped: bool = False
    repaired_rows: int | None = None
    lock_ms: float | None = None
    label: str = "key"
    archived_events: int | None = None  # read from the archive's files (--from-archive)

    @property
    def differences(self) -> int:
        return sum(d.total for d in self.diffs)

    @property
    def events_per_s(self) -> float:
        return self.bulk_events / self.bulk_seconds if self.bulk_seconds > 0 else 0.0

    def lines(self) -> list[str]:
        scope = f" (project {self.project})" if self.project else ""
        rows = ", ".join(f"{t} {n:,} rows" for t, n in self.rows.items())
        out = [
            f"{self.projection}{scope}: rebuilt {rows} from {self.bulk_events:,} events in "
            f"{self.bulk_seconds:.1f}s ({self.events_per_s:,.0f} events/s), "
            f"then {self.tail_events + self.snapshot_events:,} tail events"
        ]
        if self.archived_events is not None:
            out.append(f"archive: {self.archived_events:,} events read from archived partitions")
        for d in self.diffs:
            out.extend(d.lines(self.label))
        if self.behind:
            out.append(f"note: the live view is behind the log on {self.behind} stream(s)")
        if self.differences == 0:
            out.append("verify: no difference")
        if self.swapped:
            out.append(f"swap: done, live tables replaced (lock held {self.lock_ms:.0f} ms)")
        if self.repaired_rows is not None:
            out.append(
                f"repair: {self.repaired_rows} row(s) of project {self.project} rewritten "
                f"(lock held {self.lock_ms:.0f} ms)"
            )
        return out
