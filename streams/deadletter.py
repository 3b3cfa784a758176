"""The dead-letter stream: messages delivered too often, or that cannot be decoded (R-16).

``dead_letter`` appends the message to the shard's dead-letter stream and acknowledges it in
its source group in one atomic script (same hash tag, so also on Redis Cluster). The entry
keeps the original envelope bytes and says why, from where, and after how many deliveries.
Failing the run in Postgres is the caller's job (the worker knows the run and the reason).
"""

from __future__ import annotations

from typing import Any

from awooop import metrics
from awooop.logs import get_logger
from streams import scripts
from streams.delivery import Delivery
from streams.envelope import FIELD, encode
from streams.keys import Keys

log = get_logger(__name__)

DEAD_LETTER_MAXLEN = 100_000  # approximate cap; the run's failure is recorded in Postgres


async def dead_letter(
    redis: Any, keys: Keys, delivery: Delivery, reason: str, *, group: str | None = None
) -> None:
    """Move ``delivery`` to the dead-letter stream and XACK it, atomically."""
    await dead_letter_raw(
        redis,
        keys,
        stream=delivery.stream,
        group=group or delivery.group,
        entry_id=delivery.entry_id,
        data=encode(delivery.envelope),
        reason=reason,
        delivery_count=delivery.delivery_count,
    )


async def dead_letter_raw(
    redis: Any,
    keys: Keys,
    *,
    stream: str,
    group: str,
    entry_id: str,
    data: bytes | None,
    reason: str,
    delivery_count: int,
) -> None:
    """Same as :func:`dead_letter` for an entry that has no decodable envelope."""
    target = keys.dead_letter_stream(keys.stream_shard(stream))
    fields: list[str | bytes] = [
        FIELD,
        data or b"",
        "reason",
        reason,
        "stream",
        stream,
        "group",
        group,
        "entry_id",
        entry_id,
        "delivery_count",
        str(delivery_count),
    ]
    await scripts.DEAD_LETTER(
        redis, [target, stream], [group, entry_id, str(DEAD_LETTER_MAXLEN), *fields]
    )
    metrics.DEAD_LETTERS.inc()
    log.warning(
        "stream_dead_letter",
        stream=stream,
        group=group,
        entry_id=entry_id,
        delivery_count=delivery_count,
        reason=reason,
    )
