"""The replay's last phase (:mod:`awooop.projections.replay`): the rebuilt shadows take the live
tables' place, or, for one project, repair the live tables' differing rows in place.

Either runs in one transaction that holds locks on the live tables (ACCESS EXCLUSIVE for a
swap, EXCLUSIVE for a repair, which lets readers read) and first applies every event committed
after the cursor: every writer of a live table has finished then, since each run event is
written in the same transaction as its run row. A lock that times out is not an error: the
shadows catch up again outside the lock and the transaction is retried.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg

from awooop.core.db import Connection
from awooop.core.errors import SwapLockTimeoutError
from awooop.core.logs import get_logger
from awooop.core.pools import PLATFORM_ROLE
from awooop.eventlog.eventlog import Cursor
from awooop.projections import schema
from awooop.projections.base import KeepsCheckpoints, Projection, TableNames
from awooop.projections.diff import carry_clock_sql, repair_project
from awooop.projections.replay_report import ReplayReport

log = get_logger(__name__)

# Applies the events committed after the cursor to the shadows, in the caller's transaction.
ApplyCommitted = Callable[[Connection, Cursor], Awaitable[tuple[Cursor, int]]]
# Applies what is commit-safe after the cursor outside any lock; returns the new cursor.
CatchUp = Callable[[Cursor, ReplayReport], Awaitable[Cursor]]


@dataclass
class LiveTableChange:
    projection: Projection
    shadows: TableNames
    project: str | None
    lock_timeout_s: float
    lock_attempts: int
    apply_committed: ApplyCommitted
    catch_up: CatchUp

    async def swap(self, control: Connection, cursor: Cursor, report: ReplayReport) -> None:
        async def body(conn: Connection) -> list[schema.SwapPlan]:
            for spec in self.projection.tables:
                carry = carry_clock_sql(spec, spec.name, self.shadows[spec.name])
                if carry is not None:
                    await conn.execute(carry)
            await conn.execute("RESET ROLE")
            plans = [await schema.swap_plan(conn, spec.name) for spec in self.projection.tables]
            for plan in plans:
                await schema.swap(conn, plan)
            if isinstance(self.projection, KeepsCheckpoints):
                await self.projection.checkpoints_rebuilt(conn, None)
            return plans

        plans: list[schema.SwapPlan] = await self._locked(
            control, cursor, report, "ACCESS EXCLUSIVE", body
        )
        report.swapped = True
        for plan in plans:
            await schema.validate_foreign_keys(control, plan)
        log.info("replay_swapped", projection=self.projection.name, lock_ms=report.lock_ms)

    async def repair(self, control: Connection, cursor: Cursor, report: ReplayReport) -> None:
        assert self.project is not None
        project = self.project

        async def body(conn: Connection) -> int:
            changed = 0
            for spec in self.projection.tables:
                changed += await repair_project(
                    conn, spec, spec.name, self.shadows[spec.name], project
                )
            if isinstance(self.projection, KeepsCheckpoints):
                await self.projection.checkpoints_rebuilt(conn, project)
            return changed

        report.repaired_rows = await self._locked(control, cursor, report, "EXCLUSIVE", body)
        log.info("replay_repaired", projection=self.projection.name, project=project)

    async def _locked(
        self,
        control: Connection,
        cursor: Cursor,
        report: ReplayReport,
        mode: str,
        body: Callable[[Connection], Any],
    ) -> Any:
        """Run ``body`` in a transaction holding ``mode`` locks on the live tables, after
        applying every committed event; retry (catching up again) when the lock times out."""
        for attempt in range(1, self.lock_attempts + 1):
            try:
                async with control.transaction():
                    await control.execute(
                        f"SET LOCAL lock_timeout = {int(self.lock_timeout_s * 1000)}"
                    )
                    for spec in sorted(self.projection.tables, key=lambda t: t.name):
                        await control.execute(f"LOCK TABLE {schema.q(spec.name)} IN {mode} MODE")
                    started = time.perf_counter()
                    await control.execute(f"SET LOCAL ROLE {PLATFORM_ROLE}")
                    _, applied = await self.apply_committed(control, cursor)
                    result = await body(control)
                report.lock_ms = (time.perf_counter() - started) * 1000
                report.lock_events += applied
                return result
            except asyncpg.LockNotAvailableError:
                log.warning("replay_lock_timeout", projection=self.projection.name, attempt=attempt)
                cursor = await self.catch_up(cursor, report)
                await asyncio.sleep(min(1.0, 0.05 * attempt))
        raise SwapLockTimeoutError(
            f"could not lock {', '.join(t.name for t in self.projection.tables)} "
            f"within {self.lock_timeout_s}s in {self.lock_attempts} attempts"
        )
