"""The replay tool (R-32): rebuild a projection from the Postgres log into fresh shadow tables,
then report how the live tables differ, or swap the shadows in while writers keep running.

Phases:

1. **Bulk pass.** In one REPEATABLE READ snapshot S (xmin X), every event of the projection's
   streams that S sees is read in (stream_id, version) order through a server-side cursor,
   folded one stream at a time (memory holds one stream, never the log) and written to the
   shadow with COPY by a second connection while the first keeps reading. Every transaction
   older than X had finished at S, so the events S did not see are exactly those with
   tx_id >= X that ``pg_visible_in_snapshot(tx_id, S)`` rejects: the tail starts at the
   cursor (tx_id X-1, position max) and filters on S from then on.
2. **Indexes** of the live table are built on the shadow (faster after the COPY), then ANALYZE
   (before the bulk pass for a projection that applies through the database, a service's:
   its ``apply`` upserts on its keys).
3. **Tail.** The log is followed from that cursor by (tx_id, position), only below the xmin of
   each read's snapshot (so no late commit is ever skipped) and only what S did not see,
   applying events to the shadow with the projection's incremental ``apply`` until a pass
   finds little left.
4. **Verify.** In one REPEATABLE READ snapshot: the events committed after the cursor are applied
   to the shadow, and the shadow is compared with the live table in that same snapshot. The
   write path changes the run row and appends its event in one transaction, so in any snapshot
   the live ``awooop_run_state`` must equal the log folded with ``apply`` (lease clock aside,
   see :mod:`awooop.projections.run_state`); any difference is real. The snapshot's writes are
   rolled back (they read beyond the commit-safe cursor), so the cursor stays commit-safe.
5. **Swap.** One short transaction takes ACCESS EXCLUSIVE locks on the live tables (with a
   lock timeout; on timeout it catches up again and retries), applies every event committed
   after the cursor (every writer of the live table has finished: each run event is written in
   the same transaction as its run row), copies the live lease clock of leased runs that are
   still in the same attempt, and renames (see :mod:`awooop.projections.schema`). Readers and
   writers that queued behind the lock resolve the table name again and continue on the new
   table.
   With ``--project`` the live tables are repaired in place instead (only differing rows of that
   project are updated, inserted or deleted, under an EXCLUSIVE lock that lets readers read).

Interrupting leaves the live tables untouched (they change only in the swap transaction); a
rerun drops leftover shadows. An advisory lock lets one replay of a projection run at a time.

This module runs the phases; the bulk pass over several processes is
:mod:`awooop.projections.fanout`, the tail :mod:`awooop.projections.tail`, the locked swap or
repair :mod:`awooop.projections.replay_swap`, the report :mod:`awooop.projections.replay_report`,
the comparison and the repair :mod:`awooop.projections.diff`, the shadow tables and the swap
:mod:`awooop.projections.schema`, the archived events restored
:mod:`awooop.eventlog.archive_restore`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

import asyncpg

from awooop.core.db import Connection
from awooop.core.errors import ProjectionRegistrationError, ReplayBusyError, ReplayPrivilegeError
from awooop.core.logs import get_logger
from awooop.core.pools import PLATFORM_ROLE, connect
from awooop.eventlog.archive_restore import drop_restored_sql, restore
from awooop.eventlog.eventlog import Cursor
from awooop.projections import schema
from awooop.projections.base import AppliesInBulk, Projection, TableNames, stream_range
from awooop.projections.bulk import fold_range, raw_jsonb, use_binary_json
from awooop.projections.diff import diff_table
from awooop.projections.fanout import WorkerJob, fold_in_workers
from awooop.projections.progress import Progress
from awooop.projections.replay_report import ReplayReport
from awooop.projections.replay_swap import LiveTableChange
from awooop.projections.tail import Tail

log = get_logger(__name__)

MAX_POSITION = 2**63 - 1

# --- SQL ------------------------------------------------------------------------------------

REPLAY_LOCK = "SELECT pg_try_advisory_lock(hashtextextended('awooop-replay:' || $1, 0))"
REPLAY_UNLOCK = "SELECT pg_advisory_unlock(hashtextextended('awooop-replay:' || $1, 0))"
REPLAY_LOCK_WAIT = "SELECT pg_advisory_lock(hashtextextended('awooop-replay:' || $1, 0))"
CLEANUP_LOCK_TIMEOUT = "SET lock_timeout = '10s'"
# Shadows are created next to the live table and handed to its owner; the swap renames it;
# the shadow has the live table's row-level security, which the replay's writes must bypass.
MAY_REBUILD = """
SELECT has_schema_privilege(c.relnamespace, 'CREATE') AND pg_has_role(c.relowner, 'USAGE')
       AND (SELECT r.rolsuper OR r.rolbypassrls FROM pg_roles r WHERE r.rolname = current_user)
FROM pg_class c WHERE c.oid = to_regclass($1)
"""
SNAPSHOT = """
SELECT pg_current_snapshot()::text AS snapshot,
       pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS xmin
"""
# The size of the bulk pass, for the progress bar (the same snapshot; tail events aside).
ESTIMATE = """
SELECT coalesce(sum(version), 0)::bigint FROM awooop_event_streams
WHERE stream_id >= $1 AND stream_id < $2 AND ($3::text IS NULL OR project_id = $3)
"""
COUNT_LAGGING = "SELECT count(*) FROM ({lagging}) x"
# Where to cut the stream range between bulk workers (see awooop.projections.bulk.split_range).
STREAM_HISTOGRAM = """
SELECT histogram_bounds::text::text[] FROM pg_stats
WHERE schemaname = 'public' AND tablename = 'awooop_event_streams' AND attname = 'stream_id'
"""


class Replay:
    """Rebuild ``projection`` from the log (see the module docstring for the phases)."""

    def __init__(
        self,
        database_url: str,
        projection: Projection,
        *,
        project: str | None = None,
        progress_stream: TextIO | None = None,
        batch_rows: int = 10_000,
        fetch_rows: int = 10_000,
        workers: int = 1,
        tail_batch: int = 5_000,
        lock_timeout_s: float = 2.0,
        lock_attempts: int = 20,
        on_events: Callable[[int], None] | None = None,
        archive_dir: Path | None = None,
    ) -> None:
        self.url = database_url
        self.projection = projection
        self.project = project
        self.progress_stream = progress_stream
        self.batch_rows = batch_rows
        self.fetch_rows = fetch_rows
        # A projection that applies through the database folds in this process.
        self.in_bulk = isinstance(projection, AppliesInBulk)
        self.workers = 1 if self.in_bulk else workers
        self.tail_batch = tail_batch
        self.lock_timeout_s = lock_timeout_s
        self.lock_attempts = lock_attempts
        self.on_events = on_events  # called after each bulk batch (tests interrupt through it)
        self.archive_dir = archive_dir
        # The archived events restored for the bulk pass (--from-archive), dropped at the end;
        # a registered projection's name, never user input.
        self.archive_table = (
            f"awooop_restored_{projection.name}" if archive_dir is not None else None
        )
        self.low, self.high = stream_range(projection.stream_prefix)
        self.shadows = TableNames({t.name: schema.shadow_name(t.name) for t in projection.tables})
        self.types = projection.event_types
        self._connections: list[Connection] = []
        self.snapshot = ""  # the bulk pass's snapshot: the tail is what it did not see

    # --- the whole run ---------------------------------------------------------------------

    async def run(self, *, verify: bool = True, swap: bool = False) -> ReplayReport:
        if not self.projection.tables:
            raise ProjectionRegistrationError(
                f"projection {self.projection.name} keeps no table: there is nothing to rebuild"
            )
        report = ReplayReport(self.projection.name, self.project)
        report.label = self.projection.tables[0].label or "key"
        control = await self._connect(None)
        owner = swapped = False
        try:
            if not await control.fetchval(REPLAY_LOCK, self.projection.name):
                raise ReplayBusyError(f"another replay of {self.projection.name} is running")
            owner = True  # from here on the shadows are ours to drop
            if isinstance(self.projection, AppliesInBulk):
                await self.projection.check_tables(control)
            for spec in self.projection.tables:
                if not await control.fetchval(MAY_REBUILD, spec.name):
                    raise ReplayPrivilegeError(
                        f"this role may not rebuild {spec.name}: log in as the tables' owner "
                        "(the role that ran `awooop migrate`) or a superuser; nothing was changed"
                    )
            for spec in self.projection.tables:
                await schema.create_shadow(control, spec.name)
            if self.archive_dir is not None:
                report.archived_events = await self._restore(self.archive_dir)
            if self.in_bulk:  # its apply upserts: the shadow needs its keys from the start
                await self._build_indexes(control)
            cursor = await self._bulk(report)
            if not self.in_bulk:
                await self._build_indexes(control)
            cursor = await self._catch_up(cursor, report)
            if verify or swap:
                await self._verify(control, cursor, report)
            if swap:
                change = self._live_table_change()
                if self.project is None:
                    await change.swap(control, cursor, report)
                else:
                    await change.repair(control, cursor, report)
                swapped = True
            return report
        finally:
            await self._cleanup(owner, drop_shadows=not (swapped and self.project is None))

    async def _build_indexes(self, control: Connection) -> None:
        for spec in self.projection.tables:
            await schema.build_indexes(control, spec.name)

    async def _connect(self, role: str | None, *, binary_json: bool = False) -> Connection:
        conn = await connect(self.url, role)
        self._connections.append(conn)
        if binary_json:
            await use_binary_json(conn)
        return conn

    async def _cleanup(self, owner: bool, *, drop_shadows: bool) -> None:
        # Close everything first (an interrupted COPY or transaction rolls back), then take the
        # lock again on a fresh connection to drop the shadows and release it before returning:
        # the terminated control session's backend releases it only as it exits, a moment
        # later (a replay started right after a swap was refused as busy), and a replay that
        # started meanwhile keeps its own.
        for conn in self._connections:
            conn.terminate()
        self._connections.clear()
        if not owner:
            return
        try:
            conn = await connect(self.url)
            try:
                await conn.execute(CLEANUP_LOCK_TIMEOUT)
                await conn.fetchval(REPLAY_LOCK_WAIT, self.projection.name)
                if drop_shadows:
                    for spec in self.projection.tables:
                        await schema.drop_shadow(conn, spec.name)
                    if self.archive_table is not None:
                        await conn.execute(drop_restored_sql(self.archive_table))
                await conn.fetchval(REPLAY_UNLOCK, self.projection.name)
            finally:
                await conn.close()
        except asyncpg.LockNotAvailableError:
            if drop_shadows:
                log.warning("replay_shadows_kept", projection=self.projection.name)
        except Exception:  # the report stands; a later replay drops leftover shadows
            log.exception("replay_shadow_cleanup_failed", projection=self.projection.name)

    # --- bulk --------------------------------------------------------------------------------

    async def _bulk(self, report: ReplayReport) -> Cursor:
        reader = await self._connect(PLATFORM_ROLE)
        await raw_jsonb(reader)
        async with reader.transaction(isolation="repeatable_read", readonly=True):
            snap = await reader.fetchrow(SNAPSHOT)
            assert snap is not None
            self.snapshot, xmin = snap["snapshot"], snap["xmin"]
            total = await reader.fetchval(ESTIMATE, self.low, self.high, self.project)
            progress = Progress(
                f"replay {self.projection.name}", total, stream=self.progress_stream
            )

            def advanced(n: int) -> None:
                report.bulk_events += n
                progress.advance(n)
                if self.on_events is not None:
                    self.on_events(report.bulk_events)

            writer = await self._connect(PLATFORM_ROLE, binary_json=not self.in_bulk)
            if self.workers <= 1:
                result = await fold_range(
                    reader,
                    writer,
                    self.projection,
                    self.shadows,
                    self.low,
                    self.high,
                    self.project,
                    batch_rows=self.batch_rows,
                    fetch_rows=self.fetch_rows,
                    on_batch=advanced,
                    write_finish=True,
                    archive_table=self.archive_table,
                )
                rows = result.rows
            else:
                exported = await reader.fetchval("SELECT pg_export_snapshot()")
                histogram = await reader.fetchval(STREAM_HISTOGRAM) or []
                job = WorkerJob(
                    self.url,
                    self.projection,
                    self.project,
                    self.low,
                    self.high,
                    self.shadows,
                    self.workers,
                    self.batch_rows,
                    self.fetch_rows,
                    self.archive_table,
                    tuple(histogram),
                )
                rows = await fold_in_workers(job, exported, writer, advanced)
        for table, n in rows.items():
            report.rows[table] = report.rows.get(table, 0) + n
        for spec in self.projection.tables:
            report.rows.setdefault(spec.name, 0)
        report.bulk_seconds = progress.finish()
        return Cursor(xmin - 1, MAX_POSITION)

    # --- the archive -------------------------------------------------------------------------

    async def _restore(self, directory: Path) -> int:
        """Copy the events of every dropped partition from its file into the restore table
        (checked against the catalogue and the checksums first); return how many."""
        assert self.archive_table is not None
        conn = await self._connect(None)
        partitions, restored = await restore(conn, directory, self.archive_table)
        log.info("replay_archive_restored", partitions=partitions, events=restored)
        return restored

    # --- tail ------------------------------------------------------------------------------------

    async def _follow(self, conn: Connection, cursor: Cursor, *, safe: bool) -> tuple[Cursor, int]:
        """Apply the events after ``cursor`` to the shadows (see
        :class:`awooop.projections.tail.Tail`)."""
        tail = Tail(
            self.projection,
            self.shadows,
            self.low,
            self.high,
            self.project,
            self.snapshot,
            self.tail_batch,
        )
        return await tail.follow(conn, cursor, safe=safe)

    async def _catch_up(self, cursor: Cursor, report: ReplayReport) -> Cursor:
        writer = await self._connect(PLATFORM_ROLE)
        cursor, applied = await self._follow(writer, cursor, safe=True)
        report.tail_events += applied
        return cursor

    # --- verify ----------------------------------------------------------------------------

    async def _verify(self, control: Connection, cursor: Cursor, report: ReplayReport) -> None:
        tx = control.transaction(isolation="repeatable_read")
        await tx.start()
        try:
            await control.execute(f"SET LOCAL ROLE {PLATFORM_ROLE}")
            _, report.snapshot_events = await self._follow(control, cursor, safe=False)
            report.diffs = [
                await diff_table(control, spec, spec.name, self.shadows[spec.name], self.project)
                for spec in self.projection.tables
            ]
            report.behind = await control.fetchval(
                COUNT_LAGGING.format(lagging=self.projection.lagging_sql(TableNames())),
                self.low,
                self.high,
                self.project,
            )
        finally:
            await tx.rollback()  # the snapshot read past the commit-safe cursor: keep nothing

    # --- swap or repair ------------------------------------------------------------------

    def _live_table_change(self) -> LiveTableChange:
        async def apply_committed(conn: Connection, cursor: Cursor) -> tuple[Cursor, int]:
            return await self._follow(conn, cursor, safe=False)

        return LiveTableChange(
            self.projection,
            self.shadows,
            self.project,
            self.lock_timeout_s,
            self.lock_attempts,
            apply_committed,
            self._catch_up,
        )


def default_workers() -> int:
    """Bulk worker processes: half the CPUs (the database needs the rest), at least 2 where
    there are 2 (measured on 2 cores: 1M events at 82-88k events/s with one process, 122k with
    two), at most 8."""
    cpus = os.cpu_count() or 1
    return max(min(2, cpus), min(8, cpus // 2))


async def replay(
    database_url: str,
    projection: Projection,
    *,
    project: str | None = None,
    verify: bool = True,
    swap: bool = False,
    progress_stream: TextIO | None = None,
    workers: int = 1,
    archive_dir: Path | None = None,
) -> ReplayReport:
    return await Replay(
        database_url,
        projection,
        project=project,
        progress_stream=progress_stream,
        workers=workers,
        archive_dir=archive_dir,
    ).run(verify=verify, swap=swap)


__all__: Sequence[str] = ("Replay", "ReplayReport", "replay")
