"""Bulk operations whose process stopped (:mod:`awooop.runs.bulk`): a platform loop resumes them.

An operation runs in the process that confirmed it: the console's server or the CLI. When that
process dies, the operation's row stays ``running`` and its ``updated_at`` (moved by every
batch) stops. Every ``AWOOOP_BULK_OPERATIONS_INTERVAL_S`` the ``bulk_operations`` loop lists
running operations with no batch for :data:`awooop.runs.bulk.STALLED_S` (one read on the
platform role, across projects) and runs their remaining batches with
:func:`awooop.runs.bulk.execute`, in each operation's own project as its first executor did.

No run changes twice. Each batch locks the operation row, reads the cursor under that lock and
commits its runs' changes with the moved cursor, so two executors of one operation (this loop
and a first executor that was only slow, or two copies of this loop in two processes) take
turns, each after the other's last commit. Taking over an operation that was still moving
costs work, never a second change.

An iteration runs at most :data:`MAX_BATCHES` batches of each operation and then wakes itself
for the next, so that its heartbeat keeps coming while a large operation is resumed (``awooop
doctor`` would call a loop silent for five cycles stopped). The operations it left unfinished
are taken again at the next iteration although their ``updated_at`` is fresh: this loop moved
it. One operation that fails (Postgres away, a bug) does not stop the others: each failure is
logged with its operation, and the iteration fails after trying them all; the operation is
stalled still and tried again after the loop's backoff.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from awooop.core.db import Connection, Database
from awooop.core.logs import get_logger
from awooop.core.loops import LoopCategory, LoopContext, LoopSpec
from awooop.runs import blocked_facts, bulk
from awooop.runs.blocked import BlockedOn
from awooop.runs.listing import Decide
from awooop.services import Services

log = get_logger(__name__)

LOOP_NAME = "bulk_operations"
MAX_BATCHES = 50  # per operation and iteration: 5,000 runs, seconds rather than minutes
MAX_OPERATIONS = 100  # per iteration; more stalled at once wait for the next one


@dataclass
class Resumer:
    """Resumes stalled operations; one per loop (it remembers the operations it left unfinished)."""

    db: Database
    # blocked_on, for operations whose filter names a reason. Required: without it a batch
    # would not check the reason and change every run of the filter's statuses.
    decide: Decide
    stalled_s: float = bulk.STALLED_S
    max_batches: int = MAX_BATCHES
    continuing: set[uuid.UUID] = field(default_factory=set)

    async def once(self) -> bool:
        """One pass over the stalled operations; True when one was left unfinished."""
        also = sorted(self.continuing)

        async def find(conn: Connection) -> list[bulk.Operation]:
            return await bulk.stalled(conn, self.stalled_s, also, MAX_OPERATIONS)

        found = await self.db.in_platform(find)
        self.continuing.clear()
        failures: list[Exception] = []
        for op in found:
            try:
                after = await bulk.execute(
                    self.db,
                    op.project_id,
                    op.operation_id,
                    self.decide,
                    max_batches=self.max_batches,
                )
            except Exception as exc:
                log.warning(
                    "bulk_operation_resume_failed",
                    operation_id=str(op.operation_id),
                    operation_project_id=op.project_id,
                    error=repr(exc),
                )
                failures.append(exc)
                continue
            if after.state == "running":
                self.continuing.add(op.operation_id)
            log.info(
                "bulk_operation_resumed",
                operation_id=str(op.operation_id),
                operation_project_id=op.project_id,
                state=after.state,
                scanned=after.scanned,
                changed=after.changed,
                refused=after.refused,
            )
        if failures:
            raise failures[0]  # the loop counts the iteration failed; each one is logged above
        return bool(self.continuing)


def decider(services: Services) -> Decide:
    """blocked_on of runs as the console and the CLI decide it (one query, Redis once per
    shard), on the process's clients."""

    async def decide(
        conn: Connection, run_ids: list[uuid.UUID]
    ) -> dict[uuid.UUID, BlockedOn | None]:
        return await blocked_facts.blocked_on(
            conn, services.redis, services.keys, run_ids, services.settings.lease_ttl_s
        )

    return decide


def loops(services: Services) -> list[LoopSpec]:
    settings = services.settings
    resumer = Resumer(services.db, decider(services))

    async def body(ctx: LoopContext) -> None:
        if await resumer.once():
            ctx.wakeup.set()  # a large operation: its next batches at once

    return [
        LoopSpec(
            name=LOOP_NAME,
            category=LoopCategory.PLATFORM,
            interval_s=settings.bulk_operations_interval_s,
            body=body,
            description=f"resume bulk operations with no batch for {bulk.STALLED_S:g} s "
            "(their process stopped)",
        )
    ]
