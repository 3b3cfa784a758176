"""Dedupe expiry (R-04): a platform loop that deletes expired dedupe rows in batches.

Each batch is its own short platform transaction::

    DELETE ... WHERE ctid = ANY(ARRAY(SELECT ctid ... WHERE expires_at <= now()
                                      ORDER BY expires_at LIMIT $batch FOR UPDATE SKIP LOCKED))

The inner query walks ``awooop_channel_event_dedupe_expiry_idx`` from its oldest end and
stops after ``batch`` rows, so a batch costs the same however many rows the table holds
(``ops/bench/ingest.py`` measures it at 1M rows; ``tests/integration/test_ingest_expiry.py``
checks the plan and the pages a batch touches). SKIP LOCKED lets two expiry loops (or an
ingest that is re-inserting an expired key) run side by side without waiting on each other.
An iteration deletes batches until one comes back short, at most ``MAX_BATCHES`` of them;
with more left it wakes itself for the next iteration at once.

Correctness never depends on this loop: the ingest transaction already treats a row past
``expires_at`` as absent. The loop only keeps the table bounded.
"""

from __future__ import annotations

from awooop.core import metrics
from awooop.core.db import Database
from awooop.loops.framework import LoopCategory, LoopContext, LoopSpec
from awooop.services import Services

LOOP_NAME = "dedupe_expiry"
MAX_BATCHES = 20

# --- SQL -------------------------------------------------------------------------------------

DELETE_EXPIRED_BATCH = """
DELETE FROM awooop_channel_event_dedupe
WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM awooop_channel_event_dedupe
    WHERE expires_at <= now()
    ORDER BY expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED))
"""


async def delete_expired_batch(db: Database, batch: int) -> int:
    """Delete up to ``batch`` expired rows in one platform transaction; return how many."""
    async with db.platform_writes() as conn:
        status = await conn.execute(DELETE_EXPIRED_BATCH, batch)
    return int(status.split()[-1])


async def expire(db: Database, batch: int, max_batches: int = MAX_BATCHES) -> tuple[int, bool]:
    """Delete expired rows batch by batch: (rows deleted, whether more may be left)."""
    total = 0
    for _ in range(max_batches):
        deleted = await delete_expired_batch(db, batch)
        total += deleted
        if deleted < batch:
            return total, False
    return total, True


def loops(services: Services) -> list[LoopSpec]:
    settings = services.settings

    async def body(ctx: LoopContext) -> None:
        deleted, more = await expire(services.db, settings.dedupe_expiry_batch)
        if deleted:
            metrics.DEDUPE_EXPIRED.inc(deleted)
        if more:
            ctx.wakeup.set()

    return [
        LoopSpec(
            name=LOOP_NAME,
            category=LoopCategory.PLATFORM,
            interval_s=settings.dedupe_expiry_interval_s,
            body=body,
            description="delete expired channel-event dedupe rows in batches (R-04)",
        )
    ]
