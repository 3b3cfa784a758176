"""Gitea webhooks.

What Gitea sends (``services/webhook/deliver.go``): the event's JSON payload, either as the
body (content type ``application/json``) or as the one form field ``payload=<the JSON>``
(``application/x-www-form-urlencoded``, encoded like Go's ``url.Values.Encode``: ``+`` for
space, ``%XX`` for every byte outside ``A-Z a-z 0-9 - _ . ~``), with ``X-Gitea-Event``,
``X-Gitea-Delivery`` (a UUID per delivery) and ``X-Gitea-Signature``.

**What is signed**: ``X-Gitea-Signature`` is the hex HMAC-SHA256, with the webhook's secret,
of the JSON payload, not of the request body: for a form delivery it is the value of the
``payload`` field after percent-decoding, byte for byte. The headers (event, delivery id)
are not signed, and nothing in the payload tells when it was sent, so there is no freshness
bound to check.

**What keys the event** (R-02): Gitea never retries by itself; the only re-sending is the
"replay" action of its webhook history, which copies the stored payload into a new delivery
with a NEW ``X-Gitea-Delivery`` (and the same signature, since the payload is the same). So
by default (channel option ``gitea_key`` = ``body``) the ``provider_event_id`` is
``sha256:`` + the hex sha256 of the signed payload: a replay, or anyone posting a captured
request again under new delivery ids, is the same event within the dedupe window (200
``E-IDEMPOTENT-001`` with the first run's id). Two distinct events whose payloads are
byte-identical are one event too; Gitea's payloads carry the commits, the issue or the
repository with its update time, so that takes the same change sent twice. With
``gitea_key`` = ``delivery`` the key is ``X-Gitea-Delivery`` instead: every replay is a new
run, as is every captured request posted under a new id. Either way, once the dedupe window
has passed the same payload is a new event (Gitea signs no time).

The run's input is ``{"event": X-Gitea-Event, "delivery": X-Gitea-Delivery, "payload": <the
JSON payload>}``; both headers are as received (unsigned).
"""

from __future__ import annotations

import hashlib
from urllib.parse import unquote_to_bytes

from awooop.core.errors import AuthenticationError, InvalidInputError
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
    ChannelOptions,
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
FORM_FIELD = b"payload"
BODY_KEY_PREFIX = "sha256:"
MAX_FORM_FIELDS = 100


def signed_payload(headers: Headers, body: bytes) -> bytes:
    """What Gitea signed: the body itself, or the decoded ``payload`` field of a form body.
    A form without exactly one ``payload`` field, or with a malformed one, is
    :class:`InvalidInputError`."""
    content_type = headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != FORM:
        return body
    fields = body.split(b"&")
    if len(fields) > MAX_FORM_FIELDS:
        raise InvalidInputError(f"form body has more than {MAX_FORM_FIELDS} fields")
    values: list[bytes] = []
    for field in fields:
        name, _, value = field.partition(b"=")
        if field and _form_decode(name) == FORM_FIELD:
            values.append(_form_decode(value))
    if len(values) != 1:
        raise InvalidInputError(
            "form body has no payload field" if not values else "form body has two payload fields"
        )
    return values[0]


def _form_decode(raw: bytes) -> bytes:
    """A form-urlencoded name or value as the exact bytes it encodes (no text decoding, so
    the HMAC sees what Gitea signed)."""
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise InvalidInputError("form body is not valid (raw non-ASCII bytes)") from None
    return unquote_to_bytes(text.replace("+", " "))


def authenticate(headers: Headers, body: bytes, stored: StoredCredential) -> None:
    presented = require_header(headers, SIGNATURE_HEADER).strip().lower()
    secret = require_secret(stored)
    try:
        payload = signed_payload(headers, body)
    except InvalidInputError:
        raise AuthenticationError(AUTH_FAILED) from None  # nothing that could carry a signature
    if not equal(presented, gitea_signature(secret, payload)):
        raise AuthenticationError(AUTH_FAILED)


def provider_event_id(headers: Headers, payload: bytes, options: ChannelOptions) -> str:
    """The event's key: the sha256 of the signed payload, or with ``gitea_key`` =
    ``delivery`` the ``X-Gitea-Delivery`` header."""
    if options.gitea_key == "delivery":
        return event_id(headers.get(DELIVERY_HEADER), "X-Gitea-Delivery header")
    return BODY_KEY_PREFIX + hashlib.sha256(payload).hexdigest()


def parse(headers: Headers, body: bytes, options: ChannelOptions, _now: float) -> list[ParsedEvent]:
    payload = signed_payload(headers, body)
    value = decode_object(payload, "Gitea payload")
    key = provider_event_id(headers, payload, options)
    delivery = headers.get(DELIVERY_HEADER) or None
    if delivery is not None:
        delivery = event_id(delivery, "X-Gitea-Delivery header")  # printable, bounded
    event = headers.get(EVENT_HEADER) or None
    return [ParsedEvent(key, {"event": event, "delivery": delivery, "payload": value})]


ADAPTER = Adapter(CHANNEL_TYPE, AuthKind.SECRET, authenticate, parse)
