"""A message handed to a consumer, and turning raw stream entries into one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from awooop.streams.envelope import FIELD, Envelope, decode_envelope
from awooop.streams.keys import WORKER_GROUP


@dataclass(frozen=True)
class Delivery:
    stream: str
    entry_id: str
    envelope: Envelope
    delivery_count: int  # 1 on the first delivery; XAUTOCLAIM/XCLAIM redeliveries count up
    group: str = WORKER_GROUP  # the group it was delivered to (dead_letter acknowledges there)


class UndecodableEntry(Exception):
    """A stream entry without a decodable envelope (written by something else, or corrupt)."""

    def __init__(self, stream: str, entry_id: str, data: bytes | None, reason: str) -> None:
        super().__init__(f"{stream} {entry_id}: {reason}")
        self.stream = stream
        self.entry_id = entry_id
        self.data = data
        self.reason = reason


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def field_value(fields: Any) -> bytes | None:
    """The envelope field of an entry, given as a dict (redis-py) or a flat list (Lua)."""
    if isinstance(fields, dict):
        value = fields.get(FIELD)
        return value if isinstance(value, bytes) else None
    for i in range(0, len(fields) - 1, 2):
        if fields[i] == FIELD:
            value = fields[i + 1]
            return value if isinstance(value, bytes) else None
    return None


def to_delivery(
    stream: str, entry_id: Any, fields: Any, delivery_count: int, group: str
) -> Delivery:
    """Decode one entry; raises :class:`UndecodableEntry` when it carries no envelope."""
    entry = text(entry_id)
    data = field_value(fields)
    if data is None:
        raise UndecodableEntry(stream, entry, None, "no envelope field")
    try:
        envelope = decode_envelope(data)
    except msgspec.DecodeError as exc:
        raise UndecodableEntry(stream, entry, data, f"undecodable envelope: {exc}") from exc
    return Delivery(stream, entry, envelope, delivery_count, group)
