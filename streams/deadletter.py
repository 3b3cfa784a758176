"""The dead-letter stream: messages delivered too often, or that cannot be decoded (R-16).

``dead_letter`` appends the message to the shard's dead-letter stream and acknowledges it in
its source group in one atomic script (same hash tag, so also on Redis Cluster). The entry
keeps the original envelope bytes and says why, from where, and after how many deliveries.
Failing the run in Postgres is the caller's job (the worker knows the run and the reason).

Inspection and re-drive (``awooop deadletters``): :func:`read_dead_letters` lists a shard's
entries; :func:`redrive_entry` appends an entry's message to its stream again and deletes the
entry in one script (:data:`streams.scripts.REDRIVE`). What to do with the run first is decided
in Postgres by :mod:`awooop.runs.deadletters`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from awooop.core import metrics
from awooop.core.logs import get_logger
from streams import scripts
from streams.delivery import Delivery
from streams.envelope import FIELD, Envelope, decode_envelope, encode
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


# --- inspection and re-drive -------------------------------------------------------------------


class DeadLetter(msgspec.Struct, frozen=True, kw_only=True):
    """One entry of a shard's dead-letter stream."""

    shard: int
    entry_id: str
    data: bytes  # the original envelope bytes (empty when there were none)
    reason: str
    stream: str  # where it came from
    group: str
    source_entry_id: str
    delivery_count: int

    @property
    def id(self) -> str:
        """How commands name it: ``<shard>:<entry id>``."""
        return f"{self.shard}:{self.entry_id}"

    @property
    def dead_lettered_ms(self) -> int:
        return int(self.entry_id.split("-", 1)[0])

    def envelope(self) -> Envelope | None:
        """The message, or None when it cannot be decoded (it cannot be re-driven)."""
        try:
            return decode_envelope(self.data) if self.data else None
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None


def _text(fields: dict[bytes, bytes], name: bytes) -> str:
    return fields.get(name, b"").decode("utf-8", "replace")


def dead_letter_of(shard: int, entry_id: bytes | str, fields: dict[bytes, bytes]) -> DeadLetter:
    count = _text(fields, b"delivery_count")
    return DeadLetter(
        shard=shard,
        entry_id=entry_id.decode() if isinstance(entry_id, bytes) else entry_id,
        data=fields.get(FIELD, b""),
        reason=_text(fields, b"reason"),
        stream=_text(fields, b"stream"),
        group=_text(fields, b"group"),
        source_entry_id=_text(fields, b"entry_id"),
        delivery_count=int(count) if count.isdigit() else 0,
    )


async def read_dead_letters(
    redis: Any, keys: Keys, shard: int, *, count: int | None = None, start: str = "-"
) -> list[DeadLetter]:
    """The shard's dead letters, oldest first (at most ``count``, from ``start`` on)."""
    rows = await redis.xrange(keys.dead_letter_stream(shard), min=start, max="+", count=count)
    return [dead_letter_of(shard, entry_id, fields) for entry_id, fields in rows]


async def read_dead_letter(redis: Any, keys: Keys, shard: int, entry_id: str) -> DeadLetter | None:
    rows = await redis.xrange(keys.dead_letter_stream(shard), min=entry_id, max=entry_id)
    return None if not rows else dead_letter_of(shard, rows[0][0], rows[0][1])


async def redrive_entry(redis: Any, keys: Keys, entry: DeadLetter, target: str, data: bytes) -> int:
    """Append ``data`` (the entry's message, republished) to ``target`` and delete the entry,
    atomically: 1; 0 when the entry was already gone; -1 when the shard's epoch is gone
    (nothing written)."""
    result = await scripts.REDRIVE(
        redis,
        [keys.epoch(entry.shard), target, keys.dead_letter_stream(entry.shard)],
        [FIELD, data, entry.entry_id],
    )
    return int(result)
