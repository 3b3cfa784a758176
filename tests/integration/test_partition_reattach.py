"""A detached partition that turns out to hold rows it must keep goes back where it was, with its
row-level security forced again (awooop.eventlog.archive for the log,
awooop.eventlog.dedupe_windows for the dedupe table)."""

from __future__ import annotations

from datetime import timedelta

import asyncpg
import pytest

from awooop.core.errors import ArchiveRefusedError
from awooop.eventlog import archive, dedupe_windows
from awooop.eventlog.partition_ddl import DEDUPE, EVENTS
from awooop.eventlog.partitions import Partition

STATE = """
SELECT c.relispartition, c.relforcerowsecurity FROM pg_class c WHERE c.relname = $1
"""


async def first_partition(conn: asyncpg.Connection, view: str) -> Partition:
    row = await conn.fetchrow(
        f"SELECT partition_name, range_from, range_to FROM {view} ORDER BY range_from LIMIT 1"
    )
    assert row is not None
    return Partition(row[0], row[1], row[2])


async def test_a_log_partition_whose_count_differs_is_attached_again_and_forced(
    database_url: str,
) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        part = await first_partition(conn, "awooop_log_partitions")
        await conn.execute(EVENTS.detach(part.name))
        assert tuple(await conn.fetchrow(STATE, part.name)) == (False, True)
        with pytest.raises(ArchiveRefusedError, match="re-attached"):
            await archive._drop_detached(conn, part, archived=1)  # it holds 0 rows
        assert tuple(await conn.fetchrow(STATE, part.name)) == (True, True)
    finally:
        await conn.close()


async def test_a_dedupe_window_with_a_live_row_is_attached_again_and_forced(
    database_url: str,
) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        part = await first_partition(conn, "awooop_dedupe_partitions")
        await conn.execute(
            "INSERT INTO awooop_channel_event_dedupe (project_id, channel_type, "
            "provider_event_id, window_start, run_id, expires_at) "
            "VALUES ('p1', 'api', 'live', $1, gen_random_uuid(), now() + $2::interval)",
            part.range_from,
            timedelta(days=1),
        )
        await conn.execute(DEDUPE.detach(part.name))
        assert await dedupe_windows._drop_detached(conn, part) == 0
        assert tuple(await conn.fetchrow(STATE, part.name)) == (True, True)
        assert await conn.fetchval("SELECT count(*) FROM awooop_channel_event_dedupe") == 1
    finally:
        await conn.close()
