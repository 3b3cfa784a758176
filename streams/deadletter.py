"""Giving up on an entry no consumer can decode (R-16): record it in Postgres, then XACK.

Dead letters live in Postgres (:mod:`awooop.eventlog.deadletters`); Redis keeps no dead-letter
stream. An entry without a decodable envelope has no run and no project: it is recorded under
the platform project with its bytes, its group and entry id (one open row per entry, so a give
up repeated after a crash between the two steps records nothing new), and only then
acknowledged, so a crash can leave it pending (given up again later) but never acknowledged
and unrecorded. A run whose work message is delivered too often is the worker's to fail and
dead-letter (:mod:`awooop.worker.streaming`), in the transaction that fails the run.
"""

from __future__ import annotations

from typing import Any

from awooop.core.context import PLATFORM_PROJECT
from awooop.core.db import Database
from awooop.core.logs import get_logger
from awooop.eventlog import deadletters
from awooop.streams.keys import Keys

log = get_logger(__name__)


def source_of(keys: Keys, stream: str) -> str:
    """Which of a shard's streams ``stream`` is (the work or the events stream)."""
    shard = keys.stream_shard(stream)
    return deadletters.EVENTS if stream == keys.events_stream(shard) else deadletters.WORK


async def dead_letter_undecodable(
    db: Database | None,
    redis: Any,
    keys: Keys,
    *,
    stream: str,
    group: str,
    entry_id: str,
    data: bytes | None,
    reason: str,
    delivery_count: int,
) -> bool:
    """Record the entry as a dead letter and acknowledge it; without ``db`` (a tool that has no
    Postgres) leave it pending and say so. True when acknowledged."""
    if db is None:
        log.warning("stream_entry_undecodable", stream=stream, group=group, entry_id=entry_id)
        return False
    dead = deadletters.DeadLetterRecord(
        project_id=PLATFORM_PROJECT,
        source=source_of(keys, stream),
        group_name=group,
        source_entry_id=entry_id,
        delivery_count=delivery_count,
        reason=reason,
        message=data or b"",
    )
    await db.in_platform_writes(lambda conn: deadletters.record(conn, dead))
    await redis.xack(stream, group, entry_id)
    return True
