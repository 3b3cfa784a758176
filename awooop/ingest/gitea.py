"""Gitea webhooks.

Gitea POSTs the event as JSON (content type ``application/json``) or as a form field
``payload=<json>`` (``application/x-www-form-urlencoded``), with headers ``X-Gitea-Event``
(push, issues, pull_request, ...), ``X-Gitea-Delivery`` (a UUID per delivery, kept on
redelivery) and ``X-Gitea-Signature``: hex HMAC-SHA256 of the raw body with the webhook's
secret. ``provider_event_id`` is ``X-Gitea-Delivery`` (R-02); the run's input is
``{"event": X-Gitea-Event, "payload": <the JSON payload>}``.
"""

from __future__ import annotations

from urllib.parse import parse_qs

from awooop.errors import AuthenticationError, InvalidInputError
from awooop.ingest.auth import (
    AUTH_FAILED,
    equal,
    gitea_signature,
    require_header,
    require_secret,
)
from awooop.ingest.common import (
    Adapter,
    AuthKind,
    Headers,
    ParsedEvent,
    StoredCredential,
    decode_object,
    event_id,
)

CHANNEL_TYPE = "gitea"
SIGNATURE_HEADER = "x-gitea-signature"
DELIVERY_HEADER = "x-gitea-delivery"
EVENT_HEADER = "x-gitea-event"
FORM = "application/x-www-form-urlencoded"


def authenticate(headers: Headers, body: bytes, stored: StoredCredential) -> None:
    presented = require_header(headers, SIGNATURE_HEADER).strip().lower()
    if not equal(presented, gitea_signature(require_secret(stored), body)):
        raise AuthenticationError(AUTH_FAILED)


def provider_event_id(headers: Headers) -> str:
    return event_id(headers.get(DELIVERY_HEADER), "X-Gitea-Delivery header")


def payload_bytes(headers: Headers, body: bytes) -> bytes:
    content_type = headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != FORM:
        return body
    try:
        fields = parse_qs(body.decode(), strict_parsing=True, max_num_fields=100)
    except (UnicodeDecodeError, ValueError):
        raise InvalidInputError("form body is not valid") from None
    values = fields.get("payload")
    if not values:
        raise InvalidInputError("form body has no payload field")
    return values[0].encode()


def parse(headers: Headers, body: bytes) -> list[ParsedEvent]:
    delivery = provider_event_id(headers)
    payload = decode_object(payload_bytes(headers, body), "Gitea payload")
    event = headers.get(EVENT_HEADER) or None
    return [ParsedEvent(delivery, {"event": event, "payload": payload})]


ADAPTER = Adapter(CHANNEL_TYPE, AuthKind.SECRET, authenticate, parse)
