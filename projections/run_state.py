"""Run state as a projection: the inline table ``awooop_run_state`` and the projector's copy.

Both fold :func:`awooop.eventlog.state.apply` (imported, never re-implemented) over each run's
stream, so the write path, the replay tool and the projector cannot drift.

- ``run_state``: the table the write path maintains inline (R-10/R-11). The replay tool
  rebuilds, verifies and swaps it; it has no projector.
- ``run_state_view``: the same rows built by a projector from the event streams (R-32), in
  ``awooop_run_state_view``, plus the per-project counts by state for dashboards in
  ``awooop_run_counts``, kept in the same transaction as the rows they count.

The lease clock: workers renew ``lease_until``/``heartbeat_at`` with one statement and no
event (R-12), so while a run is RUNNING or WAITING_TOOL the live table's lease clock is newer
than the log's. Verification accepts a live value at or after the rebuilt one for those runs
(never earlier), and a swap carries the live lease clock over (see
:mod:`awooop.projections.replay`).
The same renewal writes the step a running attempt is in (``current_step*``, migration 0127):
columns of the live table only, outside RunState, never compared, carried over by a swap.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from awooop.core.db import Connection
from awooop.core.events import RUN_EVENT_TYPES, RUN_STREAM_PREFIX, run_stream_id
from awooop.eventlog.state import (
    COLUMNS,
    LEASED,
    RunState,
    apply,
    decode_state,
    row_to_state,
    state_values,
)
from awooop.projections.base import (
    BulkOutput,
    LogEvent,
    TableNames,
    TableSpec,
    check_consecutive,
    lagging_sql,
    run_of,
    runtime_event,
)

PREFIX = RUN_STREAM_PREFIX
RUN_TYPES = frozenset(t.__name__ for t in RUN_EVENT_TYPES)
CLOCK_COLUMNS = ("lease_until", "heartbeat_at")
# The step a running attempt is in (migration 0127): written by the renewal with the lease
# clock, not folded, not compared; a swap carries it over. Only the live table has them.
STEP_COLUMNS = ("current_step", "current_step_started_at", "current_step_attempt")
LIVE_TABLE = "awooop_run_state"
_LEASED_SQL = ", ".join(f"'{s}'" for s in sorted(LEASED))
COUNT_COLUMNS = ("project_id", "status", "runs")

# --- SQL ------------------------------------------------------------------------------------
# Built per table, the one place this projection composes SQL: the table is the projector's
# view (awooop_run_state_view, awooop_run_counts) or the replay's shadow of it or of
# awooop_run_state, chosen at run time, and Postgres binds values, never identifiers. The
# identifiers are the specs' constant names and their shadow_name(); every value is a
# parameter. The column list is RunState's fields (COLUMNS), as the replay's COPY writes it.
# Each S608 suppression below is for that table identifier. (The live awooop_run_state is written
# only by awooop/eventlog; a replay writes it through the shadow and the swap, see WRITERS.md.)


def _select_states(table: str) -> str:
    return f"SELECT {', '.join(COLUMNS)} FROM {table} WHERE run_id = ANY($1::uuid[])"  # noqa: S608 - table identifier (see above)


def _select_versions(table: str) -> str:
    return f"SELECT run_id, version FROM {table} WHERE run_id = ANY($1::uuid[])"  # noqa: S608 - table identifier (see above)


def _upsert(table: str) -> str:
    params = ", ".join(f"${i + 1}" for i in range(len(COLUMNS)))
    sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in COLUMNS if c != "run_id")
    return (
        f"INSERT INTO {table} ({', '.join(COLUMNS)}) VALUES ({params}) "  # noqa: S608 - table identifier (see above)
        f"ON CONFLICT (run_id) DO UPDATE SET {sets}"
    )


def _add_counts(table: str) -> str:
    # CHECK constraints are tested on the proposed row before ON CONFLICT, so a negative delta
    # is proposed as 0 and applied in DO UPDATE (a count row exists while it counts runs).
    return (
        "WITH d AS (SELECT * FROM unnest($1::text[], $2::text[], $3::int[]) "  # noqa: S608 - table identifier (see above)
        "AS d(project_id, status, delta)) "
        f"INSERT INTO {table} AS c (project_id, status, runs) "
        "SELECT project_id, status, greatest(delta, 0) FROM d "
        "ON CONFLICT (project_id, status) DO UPDATE SET runs = c.runs + (SELECT d.delta FROM d "
        "WHERE d.project_id = EXCLUDED.project_id AND d.status = EXCLUDED.status)"
    )


def _drop_zero_counts(table: str) -> str:
    return (
        f"DELETE FROM {table} WHERE runs = 0 AND (project_id, status) IN "  # noqa: S608 - table identifier (see above)
        "(SELECT * FROM unnest($1::text[], $2::text[]))"
    )


def _lagging(table: str) -> str:
    return lagging_sql(
        f"LEFT JOIN {table} v ON v.run_id = substr(s.stream_id, {len(PREFIX) + 1})::uuid"
    )


# --- pure folding ----------------------------------------------------------------------------


def fold_run(state: RunState | None, events: Sequence[LogEvent]) -> RunState:
    """The run's state after ``events`` (consecutive versions after ``state``)."""
    check_consecutive(state.version if state else 0, events)
    for e in events:
        state = apply(state, runtime_event(e))
    assert state is not None
    return state


def count_deltas(
    changes: Sequence[tuple[RunState | None, RunState]],
) -> Counter[tuple[str, str]]:
    """How the per-project counts by state move when runs go from old to new states."""
    deltas: Counter[tuple[str, str]] = Counter()
    for old, new in changes:
        if old is not None:
            deltas[(old.project_id, str(old.status))] -= 1
        deltas[(new.project_id, str(new.status))] += 1
    return deltas


def run_state_spec(name: str) -> TableSpec:
    return TableSpec(
        name=name,
        key=("run_id",),
        columns=COLUMNS,
        clock_columns=CLOCK_COLUMNS,
        clock_condition=f"s.status IN ({_LEASED_SQL})",
        carried_columns=STEP_COLUMNS if name == LIVE_TABLE else (),
        label="run_id",
    )


COUNTS_SPEC = TableSpec(
    name="awooop_run_counts", key=("project_id", "status"), columns=COUNT_COLUMNS, label="status"
)


class RunStateProjection:
    """Run rows folded with the state machine; optionally per-project counts by state."""

    name: ClassVar[str] = "run_state"
    description: ClassVar[str] = "awooop_run_state, maintained inline by the write path"
    inline = True
    skips_undeclared = False
    event_types = RUN_TYPES
    stream_prefix = PREFIX

    def __init__(self, table: str = "awooop_run_state", counts: str | None = None) -> None:
        self.table = table
        self.counts = counts
        specs = [run_state_spec(table)]
        if counts is not None:
            specs.append(COUNTS_SPEC)
        self.tables: tuple[TableSpec, ...] = tuple(specs)
        self._bulk_counts: Counter[tuple[str, str]] = Counter()

    async def load_versions(
        self, conn: Connection, names: TableNames, stream_ids: Sequence[str]
    ) -> dict[str, int]:
        rows = await conn.fetch(
            _select_versions(names[self.table]), [run_of(s) for s in stream_ids]
        )
        return {run_stream_id(r["run_id"]): r["version"] for r in rows}

    async def apply(
        self, conn: Connection, names: TableNames, events: Mapping[str, Sequence[LogEvent]]
    ) -> None:
        if not events:
            return
        run_ids = [run_of(s) for s in events]
        rows = await conn.fetch(_select_states(names[self.table]), run_ids)
        current: dict[uuid.UUID, RunState] = {r["run_id"]: row_to_state(r) for r in rows}
        changes: list[tuple[RunState | None, RunState]] = []
        for stream_id, stream_events in events.items():
            if not stream_events:
                continue
            old = current.get(run_of(stream_id))
            changes.append((old, fold_run(old, stream_events)))
        await conn.executemany(
            _upsert(names[self.table]), [state_values(new) for _, new in changes]
        )
        if self.counts is not None:
            await self._store_counts(conn, names[self.counts], count_deltas(changes))

    async def _store_counts(
        self, conn: Connection, table: str, deltas: Counter[tuple[str, str]]
    ) -> None:
        moved = {k: v for k, v in deltas.items() if v != 0}
        if not moved:
            return
        keys = sorted(moved)  # a stable order: concurrent batches lock count rows alike
        projects = [k[0] for k in keys]
        statuses = [k[1] for k in keys]
        await conn.execute(_add_counts(table), projects, statuses, [moved[k] for k in keys])
        await conn.execute(_drop_zero_counts(table), projects, statuses)

    def bulk_stream(self, events: Sequence[LogEvent], out: BulkOutput) -> None:
        self._bulk_add(fold_run(None, events), out)

    def bulk_resume(self, snapshot: bytes, events: Sequence[LogEvent], out: BulkOutput) -> None:
        """Fold a run whose first events are archived from their snapshot (the JSON of the
        RunState they fold to, in awooop_stream_snapshots)."""
        self._bulk_add(fold_run(decode_state(snapshot), events), out)

    def _bulk_add(self, state: RunState, out: BulkOutput) -> None:
        out.add(self.table, state_values(state))
        if self.counts is not None:
            self._bulk_counts[(state.project_id, str(state.status))] += 1

    def bulk_finish(self, out: BulkOutput) -> None:
        if self.counts is not None:
            for (project_id, status), runs in sorted(self._bulk_counts.items()):
                out.add(self.counts, (project_id, status, runs))
        self._bulk_counts = Counter()

    def merge_finish(
        self, parts: Sequence[dict[str, list[tuple[Any, ...]]]]
    ) -> dict[str, list[tuple[Any, ...]]]:
        """Sum the per-project counts of workers that each folded some of the runs."""
        if self.counts is None:
            return {}
        total: Counter[tuple[str, str]] = Counter()
        for part in parts:
            for project_id, status, runs in part.get(self.counts, []):
                total[(project_id, status)] += runs
        return {self.counts: [(p, s, n) for (p, s), n in sorted(total.items())]}

    def lagging_sql(self, names: TableNames) -> str:
        return _lagging(names[self.table])


class RunStateViewProjection(RunStateProjection):
    name: ClassVar[str] = "run_state_view"
    description: ClassVar[str] = (
        "awooop_run_state_view (run state built by a projector) and awooop_run_counts "
        "(runs per project and state)"
    )
    inline = False
    skips_undeclared = False

    def __init__(self) -> None:
        super().__init__(table="awooop_run_state_view", counts="awooop_run_counts")


# --- queries for dashboards and APIs ---------------------------------------------------------

SELECT_COUNTS = "SELECT project_id, status, runs FROM awooop_run_counts ORDER BY project_id, status"


async def counts_by_state(conn: Connection) -> dict[str, dict[str, int]]:
    """Runs per project and state (a tenant transaction sees its own project only)."""
    result: dict[str, dict[str, int]] = {}
    for r in await conn.fetch(SELECT_COUNTS):
        result.setdefault(r["project_id"], {})[r["status"]] = r["runs"]
    return result
