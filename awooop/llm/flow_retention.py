"""Retention of model-call flow rows (migrations 0133, 0136): the reservation of every call
and the wait of every held call stay in Postgres after the call, so that ``list`` and
``blocked_on`` can explain what happened; past ``AWOOOP_LLM_FLOW_RETENTION_S`` they are
deleted, so the tables hold the recent calls only.

:func:`expire_once` runs in the platform loop ``dedupe_expiry`` (:mod:`awooop.loops.dedupe_expiry`,
the loop that keeps the platform's tables bounded). Each step is a batch of at most
:data:`BATCH` rows in its own short transaction, oldest first, taken with ``FOR UPDATE SKIP
LOCKED`` (any number of loops may run; a row in use is left for the next pass) and found
through a partial index of exactly the rows it may delete, so a pass costs the rows it
deletes, however large the tables are. A pass stops after :data:`MAX_BATCHES` batches of a
kind; the next pass goes on.

1. An open reservation of a period that ended, made longer ago than the retention, whose
   attempt no longer holds its lease (a crashed attempt no refused call swept) is released,
   uncharged, and taken off its counter, as a refused call would have done.
2. Reservations settled or released longer ago than the retention are deleted.
3. Waits that ended longer ago than the retention are deleted.

Budget counters (one row per budget scope and period) are the record of what each period
used and are kept. Nothing here changes run state: replay folds the runs' events only.
"""

from __future__ import annotations

import functools
from typing import Any

from awooop.core.db import Connection, Database
from awooop.core.logs import get_logger
from awooop.eventlog import queries

log = get_logger(__name__)

RELEASE_DEAD = queries.load("llm_reservations_release_dead")
EXPIRE_RESERVATIONS = queries.load("llm_reservations_expire")
EXPIRE_WAITS = queries.load("llm_waits_expire")

BATCH = 1000
MAX_BATCHES = 50  # per kind and pass: at most 50,000 rows a minute each


async def expire_once(
    db: Database, retention_s: float, *, batch: int = BATCH, max_batches: int = MAX_BATCHES
) -> dict[str, int]:
    """One retention pass: how many reservations were released and deleted, waits deleted."""
    done = {"released": 0, "reservations": 0, "waits": 0}
    for _ in range(max_batches):
        row = await db.in_platform_writes(
            lambda conn: conn.fetchrow(RELEASE_DEAD, retention_s, batch)
        )
        released = 0 if row is None else int(row["released"])
        done["released"] += released
        if released < batch:
            break
    for kind, sql in (("reservations", EXPIRE_RESERVATIONS), ("waits", EXPIRE_WAITS)):
        expire = functools.partial(_fetch, sql, retention_s, batch)
        for _ in range(max_batches):
            rows = await db.in_platform_writes(expire)
            done[kind] += len(rows)
            if len(rows) < batch:
                break
    if any(done.values()):
        log.info("llm_flow_rows_expired", retention_s=retention_s, **done)
    return done


async def _fetch(sql: str, retention_s: float, batch: int, conn: Connection) -> list[Any]:
    return list(await conn.fetch(sql, retention_s, batch))
