"""LINE Messaging API webhooks.

LINE POSTs ``{"destination": "U...", "events": [...]}`` where one request may carry several
events, each with a ``webhookEventId`` (a ULID, kept on redelivery), and signs the raw body:
``X-Line-Signature`` is base64 HMAC-SHA256 with the channel secret. Each element of
``events`` becomes its own run (R-02), keyed by its ``webhookEventId``; the run's input is
``{"destination": ..., "event": <the element>}``. The request LINE sends to verify a webhook
URL has an empty ``events`` list: it is accepted and creates nothing.

If any element lacks a ``webhookEventId`` the whole request is refused (422) and nothing is
written: LINE retries requests, not single events.
"""

from __future__ import annotations

from awooop.errors import AuthenticationError, InvalidInputError
from awooop.ingest.auth import AUTH_FAILED, equal, line_signature, require_header, require_secret
from awooop.ingest.common import (
    Adapter,
    AuthKind,
    Headers,
    ParsedEvent,
    StoredCredential,
    decode_object,
    event_id,
)

CHANNEL_TYPE = "line"
SIGNATURE_HEADER = "x-line-signature"
MAX_EVENTS = 100


def authenticate(headers: Headers, body: bytes, stored: StoredCredential) -> None:
    presented = require_header(headers, SIGNATURE_HEADER).strip()
    if not equal(presented, line_signature(require_secret(stored), body)):
        raise AuthenticationError(AUTH_FAILED)


def provider_event_id(event: object) -> str:
    if not isinstance(event, dict):
        raise InvalidInputError("each element of events must be an object", field="events")
    return event_id(event.get("webhookEventId"), "webhookEventId")


def parse(_headers: Headers, body: bytes) -> list[ParsedEvent]:
    request = decode_object(body, "LINE webhook body")
    events = request.get("events")
    if not isinstance(events, list):
        raise InvalidInputError("events must be a list", field="events")
    if len(events) > MAX_EVENTS:
        raise InvalidInputError(f"more than {MAX_EVENTS} events in one request")
    destination = request.get("destination")
    return [
        ParsedEvent(provider_event_id(e), {"destination": destination, "event": e}) for e in events
    ]


ADAPTER = Adapter(CHANNEL_TYPE, AuthKind.SECRET, authenticate, parse)
