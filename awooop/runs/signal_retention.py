"""Retention of the signals of finished runs (migrations 0144 and 0151): a signal stays in
``awooop_signals`` while its run lives (a later wait may take it; a repeat of its key is a
duplicate); once the run has finished (its signals' ``run_ended_at``, set by the trigger on
``awooop_run_state`` in the transaction that finished it) and ``AWOOOP_SIGNAL_RETENTION_S`` has
passed, it is deleted, delivered or not: a delivered signal's payload, key and sender are in
the run's ``SignalDelivered`` event, its record.

:func:`expire_once` runs in the platform loop ``dedupe_expiry`` (the loop that keeps the
platform's tables bounded): batches of at most :data:`BATCH` rows, each in its own short
transaction, the oldest end first, taken with ``FOR UPDATE SKIP LOCKED`` (any number of loops;
a row in use is left for the next pass) through a partial index of exactly the rows it may
delete (``awooop_signals_finished_idx``), so a pass costs the rows it deletes, however many
signals live runs keep. A pass stops after :data:`MAX_BATCHES` batches; the next one goes on.
Nothing here changes run state or events: a repeat of a deleted signal's key to its finished
run is refused (E-SIGNAL-002) rather than answered as a duplicate.
"""

from __future__ import annotations

from awooop.core.db import Database
from awooop.core.logs import get_logger
from awooop.eventlog import queries

log = get_logger(__name__)

EXPIRE = queries.load("signals_expire")

BATCH = 1000
MAX_BATCHES = 50  # per pass: at most 50,000 signals a minute


async def expire_once(
    db: Database, retention_s: float, *, batch: int = BATCH, max_batches: int = MAX_BATCHES
) -> int:
    """One retention pass: how many signals of finished runs were deleted."""
    done = 0
    for _ in range(max_batches):
        rows = await db.in_platform_writes(lambda conn: conn.fetch(EXPIRE, retention_s, batch))
        done += len(rows)
        if len(rows) < batch:
            break
    if done:
        log.info("signals_expired", retention_s=retention_s, deleted=done)
    return done
