"""``awooop replay run_state --tail N``: verify the runs the last N events of the log touched,
at a cost that depends on N, not on the size of the log.

In one REPEATABLE READ snapshot: the run streams among the last N positions (the primary key's
index, per partition), their events and snapshots (the (stream_id, version) index and
awooop_stream_snapshots' key), folded as the bulk pass folds them
(:class:`awooop.projections.bulk.StreamFolder`), copied into a temporary table, and compared
with those runs' live rows by the same comparison as a full replay
(:func:`awooop.projections.diff.diff_table`, lease clock rule included). The write path changes
a run's row and appends its event in one transaction, so in one snapshot any difference is real.
Nothing is written but the temporary table, which goes with the transaction.
"""

from __future__ import annotations

import time

from awooop.core.pools import PLATFORM_ROLE, connect
from awooop.eventlog.state import COLUMNS
from awooop.projections.base import BulkOutput, stream_range
from awooop.projections.bulk import SNAPSHOTS_OF_STREAMS, StreamFolder, raw_jsonb
from awooop.projections.diff import TableDiff, diff_table
from awooop.projections.run_state import PREFIX, RunStateProjection, run_state_spec

# --- SQL -------------------------------------------------------------------------------------
# The newest N events by position: a backward walk of each partition's primary key, merged
# (a "position > max - N" bound is unknown when the plan is made: it scanned every partition).
TAIL_STREAMS = """
SELECT DISTINCT stream_id FROM (
    SELECT stream_id FROM awooop_events
    WHERE stream_id >= $2 AND stream_id < $3
    ORDER BY position DESC
    LIMIT $1
) AS tail
"""
SHADOW = "tail_verify_shadow"
CREATE_SHADOW = f"CREATE TEMP TABLE {SHADOW} (LIKE awooop_run_state) ON COMMIT DROP"
# The live rows of exactly the runs verified (an alias: diff_sql reads it as a table), found
# from the shadow's rows through the primary key: the planner must not scan the live table.
LIVE = f"(SELECT l.* FROM {SHADOW} s JOIN awooop_run_state l USING (run_id)) AS live"  # noqa: S608 - constant identifiers
ANALYZE_SHADOW = f"ANALYZE {SHADOW}"
NO_JIT = "SET jit = off"


class TailReport:
    def __init__(self, events: int) -> None:
        self.events = events
        self.runs = 0
        self.seconds = 0.0
        self.diff = TableDiff(table="awooop_run_state")

    def lines(self) -> list[str]:
        out = [
            f"run_state tail: {self.runs:,} runs touched by the last {self.events:,} events, "
            f"verified in {self.seconds:.2f}s"
        ]
        out.extend(self.diff.lines("run_id"))
        if self.diff.total == 0:
            out.append("verify: no difference")
        return out


async def verify_tail(url: str, events: int) -> TailReport:
    report = TailReport(events)
    started = time.perf_counter()
    projection = RunStateProjection()
    low, high = stream_range(PREFIX)
    conn = await connect(url, PLATFORM_ROLE)
    try:
        # A few hundred rows by key: estimates over the whole log would otherwise pass
        # jit_above_cost and compile each statement (seconds at 10M events).
        await conn.execute(NO_JIT)
        await raw_jsonb(conn)
        async with conn.transaction(isolation="repeatable_read"):
            streams = [r[0] for r in await conn.fetch(TAIL_STREAMS, events, low, high)]
            out = BulkOutput()
            folder = StreamFolder(projection, out)
            for r in await conn.fetch(SNAPSHOTS_OF_STREAMS, streams):
                folder.add(r)
            folder.finish()
            rows = out.rows.get(projection.table, [])
            report.runs = len(rows)
            await conn.execute(CREATE_SHADOW)
            await conn.copy_records_to_table(SHADOW, records=rows, columns=COLUMNS)
            await conn.execute(ANALYZE_SHADOW)  # its size, for the join plan below
            spec = run_state_spec(projection.table)
            report.diff = await diff_table(conn, spec, LIVE, SHADOW, None)
    finally:
        await conn.close()
    report.seconds = time.perf_counter() - started
    return report
