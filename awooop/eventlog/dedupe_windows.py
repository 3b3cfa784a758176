"""The dedupe table's windows (migrations/0112_partitioned_dedupe.sql): create them ahead of the
clock, and drop a window's partition once every row in it has expired.

``awooop_channel_event_dedupe`` is partitioned by ``window_start``, one partition per fixed
7-day window. Ingest writes rows only in the current window and the next one, whatever the
TTL, so partitions are needed just :data:`AHEAD` of the clock. A window's partition is dead
when it ended and every row in it is past ``expires_at``: those rows count as absent already,
so dropping them changes no answer. Deciding that takes two steps:

1. :func:`candidates` (pure): windows that ended at least the longest TTL ago (the setting, or
   any channel's ``dedupe_ttl_s``) and before the previous window: no row of theirs can still
   be live, unless a TTL was shortened after the row was written.
2. :func:`drop_dead`, per candidate, as the tables' owner (``DETACH ... CONCURRENTLY`` is the
   owner's, and lets ingest go on): the newest ``expires_at`` of the partition must be past;
   then ``DETACH PARTITION ... CONCURRENTLY``, the same check on the detached table (a row
   that arrived meanwhile re-attaches it), and ``DROP TABLE``. A crash between the steps is
   finished on the next call (a pending detach is finalised, a detached window dropped).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from awooop.core.db import Connection
from awooop.core.logs import get_logger
from awooop.core.pools import PLATFORM_ROLE, connect
from awooop.eventlog.partition_ddl import DEDUPE, DETACH_PENDING
from awooop.eventlog.partitions import Partition
from awooop.eventlog.partitions import covered_until as covered_until  # ingest stops WIDTH before

log = get_logger(__name__)

WIDTH = timedelta(days=7)  # fixed by awooop_dedupe_window(): never a setting
AHEAD = timedelta(days=14)  # a loop that stops for this long still leaves ingest its windows

# --- SQL -------------------------------------------------------------------------------------
ENSURE = "SELECT awooop_ensure_dedupe_partitions($1::timestamptz, $2::timestamptz)"
# Attaching takes SHARE UPDATE EXCLUSIVE on the table, which a VACUUM holds: wait a while,
# then try again at the next iteration (the windows are a week ahead).
LOCK_TIMEOUT = "SET LOCAL lock_timeout = '5s'"
LIST = """
SELECT partition_name, range_from, range_to FROM awooop_dedupe_partitions ORDER BY range_from
"""
NOW = "SELECT now()"
STATEMENT_TIMEOUT = "SET statement_timeout = '60s'"
LONGEST_TTL = "SELECT max(dedupe_ttl_s) FROM awooop_channels"
SET_PLATFORM = f"SET LOCAL ROLE {PLATFORM_ROLE}"
MAY_DROP = """
SELECT pg_has_role(c.relowner, 'USAGE') FROM pg_class c
WHERE c.oid = 'awooop_channel_event_dedupe'::regclass
"""
NEWEST_EXPIRY = """
SELECT max(expires_at) FROM awooop_channel_event_dedupe
WHERE window_start >= $1 AND window_start < $2
"""
DETACHED = """
SELECT c.relname FROM pg_class c
WHERE c.relname ~ '^awooop_channel_event_dedupe_p[0-9]{8}$' AND c.relkind = 'r'
  AND NOT c.relispartition
"""
SUMMARY_COLUMNS = "count(*), max(expires_at)"

# A window is a partition of the dedupe table: its name and range.
Window = Partition


def window_of(name: str) -> Window:
    """The window a partition's name stands for (``..._pYYYYMMDD``: its first day, UTC)."""
    start = datetime.strptime(DEDUPE.checked(name)[-8:] + "+0000", "%Y%m%d%z")
    return Window(name, start, start + WIDTH)


# --- decisions -------------------------------------------------------------------------------


def candidates(parts: Sequence[Window], now: datetime, longest_ttl: timedelta) -> list[Window]:
    """The windows that may be dead, oldest first: ended at least ``longest_ttl`` ago, and
    before the previous window (a transaction whose clock is in the previous window may still
    claim the current one, never an older one)."""
    return [
        p
        for p in sorted(parts, key=lambda p: p.range_from)
        if p.range_to + longest_ttl <= now and p.range_to + WIDTH <= now
    ]


# --- I/O -------------------------------------------------------------------------------------


async def ensure(conn: Connection, now: datetime) -> int:
    """Create the missing windows from ``now``'s to ``now + AHEAD``'s; return how many (in the
    caller's platform transaction)."""
    await conn.execute(LOCK_TIMEOUT)
    created = await conn.fetchval(ENSURE, now, now + AHEAD)
    return int(created or 0)


async def windows(conn: Connection) -> list[Window]:
    """The attached windows, oldest first."""
    return [Window(r[0], r[1], r[2]) for r in await conn.fetch(LIST)]


async def longest_ttl(conn: Connection, default_s: float) -> timedelta:
    """The longest TTL any channel may have written with: the setting or a channel's own."""
    channel = await conn.fetchval(LONGEST_TTL)
    return timedelta(seconds=max(default_s, float(channel or 0)))


async def drop_dead(url: str, now: datetime, longest: timedelta, parts: Sequence[Window]) -> int:
    """Detach and drop the dead windows among ``candidates(parts, ...)``; return the rows they
    held. Connects as ``url``'s role, which must own the table (else nothing is dropped and a
    warning is logged)."""
    dropped_rows = 0
    conn = await connect(url)
    try:
        if not await conn.fetchval(MAY_DROP):
            log.warning(
                "dedupe_windows_not_dropped",
                reason="this role does not own awooop_channel_event_dedupe; run the loop with "
                "AWOOOP_DATABASE_URL of the role that ran `awooop migrate`",
            )
            return 0
        # Detaching waits for every transaction that may still read the window; a bound keeps a
        # stuck one from holding the loop (a cancelled detach is finished next time).
        await conn.execute(STATEMENT_TIMEOUT)
        dropped_rows += await _finish_detached(conn)
        for part in candidates(parts, now, longest):
            async with conn.transaction():
                await conn.execute(SET_PLATFORM)
                newest = await conn.fetchval(NEWEST_EXPIRY, part.range_from, part.range_to)
            if newest is not None and newest > now:
                continue  # a row written before its channel's TTL was shortened
            await conn.execute(DEDUPE.detach(part.name))
            dropped_rows += await _drop_detached(conn, part)
    finally:
        await conn.close()
    return dropped_rows


async def _drop_detached(conn: Connection, part: Window) -> int:
    await conn.execute(DEDUPE.no_force(part.name))
    summary = await conn.fetchrow(DEDUPE.select(part.name, SUMMARY_COLUMNS))
    assert summary is not None  # an aggregate returns one row
    rows, newest = summary
    if newest is not None and newest > await conn.fetchval(NOW):
        # A live row arrived: keep the window.
        await conn.execute(DEDUPE.attach(part.name, part.range_from, part.range_to))
        await conn.execute(DEDUPE.force(part.name))
        return 0
    await conn.execute(DEDUPE.drop(part.name))
    log.info("dedupe_window_dropped", partition=part.name, rows=rows)
    return int(rows)


async def _finish_detached(conn: Connection) -> int:
    """Complete what a crash interrupted: a detach left pending, a detached window not dropped."""
    for row in await conn.fetch(DETACH_PENDING, DEDUPE.parent):
        await conn.execute(DEDUPE.finalize(row["relname"]))
    rows = 0
    for row in await conn.fetch(DETACHED):
        rows += await _drop_detached(conn, window_of(row["relname"]))
    return rows
