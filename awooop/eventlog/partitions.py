"""The log's time partitions (migrations/0100_partitioned_log.sql): create them ahead, list
them, and decide which one is due for the archive.

``awooop_events`` is partitioned by ``recorded_at`` into ranges of ``AWOOOP_LOG_PARTITION_DAYS``
days. The ``log_partitions`` loop keeps partitions ahead of the clock (a row with no partition
would be refused) and hands the oldest partition that ended more than
``AWOOOP_LOG_RETENTION_DAYS`` ago to the archiver (:mod:`awooop.eventlog.archive`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import msgspec

from awooop.core.db import Connection

# How far ahead of the clock partitions exist: a loop that stops for this long still leaves
# writers a partition to write to (the doctor warns well before).
AHEAD = timedelta(days=14)

# --- SQL -------------------------------------------------------------------------------------
ENSURE = "SELECT awooop_ensure_log_partitions($1::timestamptz, $2::timestamptz, $3::int)"
# Attaching takes a SHARE UPDATE EXCLUSIVE lock on the log, which a VACUUM or another attach
# holds: wait a while, then try again at the next iteration (the partitions are days ahead).
LOCK_TIMEOUT = "SET LOCAL lock_timeout = '5s'"
LIST = """
SELECT partition_name, range_from, range_to FROM awooop_log_partitions ORDER BY range_from
"""
NOW = "SELECT now()"


class Partition(msgspec.Struct, frozen=True):
    name: str
    range_from: datetime
    range_to: datetime


async def ensure(conn: Connection, now: datetime, days: int) -> int:
    """Create the missing partitions from ``now`` to ``now + AHEAD``; return how many (in the
    caller's transaction)."""
    await conn.execute(LOCK_TIMEOUT)
    created = await conn.fetchval(ENSURE, now, now + AHEAD, days)
    return int(created or 0)


async def partitions(conn: Connection) -> list[Partition]:
    """The log's partitions, oldest first."""
    return [Partition(r[0], r[1], r[2]) for r in await conn.fetch(LIST)]


def due_for_archive(
    parts: Sequence[Partition], now: datetime, retention: timedelta
) -> Partition | None:
    """The oldest partition, when it ended at least ``retention`` before ``now``. Partitions go
    to the archive oldest first, so the log stays one unbroken range of time."""
    if not parts:
        return None
    oldest = min(parts, key=lambda p: p.range_from)
    return oldest if oldest.range_to + retention <= now else None


def covered_until(parts: Sequence[Partition]) -> datetime | None:
    """Where the newest partition ends: writes after that instant would be refused."""
    return max((p.range_to for p in parts), default=None)
