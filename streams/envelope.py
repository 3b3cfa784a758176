"""The stream message envelope: compact msgpack, one encoder and decoder built once.

A stream entry has one field, ``e``, holding an :class:`Envelope`. Evolution rules: fields are
only appended at the end, each new one with a default; no field is removed, renamed or retyped
(``array_like`` encodes by position).
"""

from __future__ import annotations

import uuid

import msgspec

FIELD = b"e"


class Envelope(msgspec.Struct, frozen=True, array_like=True):
    event_id: uuid.UUID
    position: int
    tx_id: int
    stream_id: str
    version: int
    project_id: str
    event_type: str
    payload: bytes  # the event, as stored in the log (msgspec JSON)
    attempt: int = 0  # publications of this event: 0 first, +1 on each republish
    traceparent: str | None = None
    tracestate: str | None = None
    recorded_at: float = 0.0  # unix seconds of the commit, for latency metrics
    # Published ahead of the relay's cursor (streams/relay_ahead.py), which stood at this
    # (tx_id, position): only the log up to there is known to precede this entry in its
    # stream. None: published in log order (every earlier row of the log came before it).
    ahead_of: tuple[int, int] | None = None


class Notice(msgspec.Struct, frozen=True, array_like=True):
    """A contract invalidation notice (R-22, R-25)."""

    event_id: uuid.UUID
    event_type: str
    project_id: str
    contract_family: str
    contract_id: str
    old_revision_id: uuid.UUID | None
    new_revision_id: uuid.UUID
    traceparent: str | None = None
    created_at: float = 0.0


_encoder = msgspec.msgpack.Encoder()
_envelope_decoder = msgspec.msgpack.Decoder(Envelope)
_notice_decoder = msgspec.msgpack.Decoder(Notice)


def encode(message: Envelope | Notice) -> bytes:
    return _encoder.encode(message)


def decode_envelope(data: bytes) -> Envelope:
    return _envelope_decoder.decode(data)


def decode_notice(data: bytes) -> Notice:
    return _notice_decoder.decode(data)
