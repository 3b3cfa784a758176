"""Pending-entry reclaim (R-16): take over messages a dead consumer left behind.

A message read by a consumer stays in the group's pending-entries list until acknowledged.
:func:`autoclaim` moves entries idle longer than ``min_idle_ms`` to the caller and reports how
often each has now been delivered (the caller dead-letters a message delivered too often).
:func:`touch` lets a live consumer keep its own long-running entries from looking idle;
:func:`set_deliveries` takes back deliveries that the caller decided do not count. The DB lease
stays the authority over who runs a run: a reclaimed message only says "look at it".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from awooop.core.db import Database
from awooop.core.logs import get_logger
from awooop.streams import scripts
from awooop.streams.deadletter import dead_letter_undecodable
from awooop.streams.delivery import Delivery, UndecodableEntry, text, to_delivery
from awooop.streams.keys import Keys

log = get_logger(__name__)

CLAIM_STEP = 100  # XAUTOCLAIM COUNT per script call (Redis scans up to 10x that per call)


async def autoclaim(
    redis: Any,
    stream: str,
    group: str,
    consumer: str,
    min_idle_ms: int,
    count: int = 100,
    *,
    keys: Keys | None = None,
    db: Database | None = None,
) -> list[Delivery]:
    """Claim up to ``count`` entries idle for ``min_idle_ms`` (one sweep of the PEL).

    Each Delivery carries the delivery count including this claim. Entries deleted from the
    stream while pending (trimmed) are dropped from the PEL by Redis and logged. An entry
    without a decodable envelope is dead-lettered (recorded in Postgres, then acknowledged)
    when ``keys`` and ``db`` are given, else skipped and left pending.
    """
    deliveries: list[Delivery] = []
    cursor = "0-0"
    while len(deliveries) < count:
        step = min(CLAIM_STEP, count - len(deliveries))
        next_cursor, entries, deleted = await scripts.AUTOCLAIM(
            redis, [stream], [group, consumer, str(min_idle_ms), cursor, str(step)]
        )
        for entry_id, fields, delivery_count in entries:
            try:
                deliveries.append(to_delivery(stream, entry_id, fields, int(delivery_count), group))
            except UndecodableEntry as bad:
                if keys is None:
                    log.warning("stream_entry_undecodable", stream=stream, entry_id=bad.entry_id)
                else:
                    await dead_letter_undecodable(
                        db,
                        redis,
                        keys,
                        stream=stream,
                        group=group,
                        entry_id=bad.entry_id,
                        data=bad.data,
                        reason=bad.reason,
                        delivery_count=int(delivery_count),
                    )
        if deleted:
            log.warning(
                "stream_pending_entries_deleted",
                stream=stream,
                group=group,
                entry_ids=[text(i) for i in deleted],
            )
        cursor = text(next_cursor)
        if cursor == "0-0":
            break
    return deliveries


async def touch(
    redis: Any, stream: str, group: str, consumer: str, entry_ids: Sequence[str]
) -> None:
    """Reset the idle time of ``entry_ids`` that ``consumer`` still owns (no delivery counted).

    Entries another consumer has reclaimed meanwhile are left with it.
    """
    if entry_ids:
        await scripts.TOUCH(redis, [stream], [group, consumer, *entry_ids])


async def set_deliveries(
    redis: Any, stream: str, group: str, consumer: str, entry_id: str, count: int
) -> bool:
    """Set the delivery count of ``entry_id`` if ``consumer`` still owns it; False when another
    consumer reclaimed it meanwhile (it keeps its own count)."""
    return bool(await scripts.SET_DELIVERIES(redis, [stream], [group, consumer, entry_id, count]))
