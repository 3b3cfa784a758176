"""The plain API channel, for callers that speak HTTP but no provider's format.

``POST`` a JSON object with ``Authorization: Bearer <token>`` (from ``awooop tokens create
PROJECT --channel api``) and ``Idempotency-Key: <1..256 printable characters>``, chosen by the
caller and reused on every retry of the same request. ``provider_event_id`` is the
``Idempotency-Key`` (R-02); the run's input is the body. **Nothing is signed**: the token is
the proof, so whoever sees one request can send any event under any key; a retry (or a
captured request) with the same key is a duplicate within the dedupe window.
"""

from __future__ import annotations

from awooop.ingest.auth import authenticate_bearer
from awooop.ingest.common import (
    Adapter,
    AuthKind,
    ChannelOptions,
    Headers,
    ParsedEvent,
    decode_object,
    event_id,
)

CHANNEL_TYPE = "api"
IDEMPOTENCY_HEADER = "idempotency-key"


def provider_event_id(headers: Headers) -> str:
    return event_id(headers.get(IDEMPOTENCY_HEADER), "Idempotency-Key header")


def parse(
    headers: Headers, body: bytes, _options: ChannelOptions, _now: float
) -> list[ParsedEvent]:
    key = provider_event_id(headers)
    return [ParsedEvent(key, decode_object(body))]


ADAPTER = Adapter(CHANNEL_TYPE, AuthKind.BEARER, authenticate_bearer, parse)
