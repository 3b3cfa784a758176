"""LINE Messaging API webhooks.

LINE POSTs ``{"destination": "U...", "events": [...]}`` where one request may carry several
events. Each element of ``events`` becomes its own run (R-02); the run's input is
``{"destination": ..., "event": <the element>}``. The request LINE sends to verify a webhook
URL has an empty ``events`` list: it is accepted and creates nothing.

**What is signed**: the raw body. ``X-Line-Signature`` is the base64 HMAC-SHA256 of the body
with the channel secret, so everything in the body is LINE's word, including each event's
``timestamp`` (milliseconds since the epoch) and ``deliveryContext.isRedelivery``.

**What keys the event**: each element's ``webhookEventId`` (a ULID). LINE's redelivery (when
"webhook redelivery" is on in the LINE Developers Console) sends the same events again with
the same ``webhookEventId`` and ``isRedelivery: true``, so a redelivery within the dedupe
window is a duplicate (200 ``E-IDEMPOTENT-001``), as is a captured request posted again.

**Freshness bound**: because LINE signs the time of each event, a request carrying an event
older than the channel's ``max_event_age_s`` (default 3600 s) is refused whole with 403
``E-INGEST-004`` and nothing is written; an event LINE flags as redelivered may be as old as
``max_redelivery_age_s`` (default 86400 s; never less than ``max_event_age_s``), since LINE
redelivers for a while after a failure and does not publish for how long. An event from the
future (clock skew) is accepted. With both bounds shorter than the dedupe window (7 days by
default) a captured request is never a new run: within the window it is a duplicate, after
the bound it is refused. A missing or non-integer ``timestamp`` is 400 ``E-INPUT-001``.

If any element lacks a ``webhookEventId`` the whole request is refused (422) and nothing is
written: LINE retries requests, not single events.
"""

from __future__ import annotations

from typing import Any

from awooop.core.errors import AuthenticationError, InvalidInputError, StaleDeliveryError
from awooop.ingest.auth import AUTH_FAILED, equal, line_signature, require_header, require_secret
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


def check_fresh(event: dict[str, Any], options: ChannelOptions, now: float) -> None:
    """Refuse an event older than the channel accepts (:class:`StaleDeliveryError`): its
    signed ``timestamp`` (ms) against ``max_event_age_s``, or, when LINE flags it as a
    redelivery, against ``max_redelivery_age_s`` (at least ``max_event_age_s``)."""
    timestamp = event.get("timestamp")
    if isinstance(timestamp, bool) or not isinstance(timestamp, int) or timestamp < 0:
        raise InvalidInputError(
            "timestamp must be a non-negative integer (milliseconds)", field="timestamp"
        )
    context = event.get("deliveryContext")
    redelivery = isinstance(context, dict) and context.get("isRedelivery") is True
    bound = options.max_event_age_s
    option = "max_event_age_s"
    if redelivery and options.max_redelivery_age_s > bound:
        bound, option = options.max_redelivery_age_s, "max_redelivery_age_s"
    age_ms = int(now * 1000) - timestamp  # integers: a huge timestamp cannot overflow
    if age_ms > bound * 1000:
        raise StaleDeliveryError(
            f"event {str(event.get('webhookEventId'))[:40]} is {age_ms // 1000} s old"
            f"{' (a redelivery)' if redelivery else ''}; this channel accepts {bound} s "
            f"({option}, awooop channels set-option)",
            age_s=age_ms // 1000,
            bound_s=bound,
        )


def parse(headers: Headers, body: bytes, options: ChannelOptions, now: float) -> list[ParsedEvent]:
    request = decode_object(body, "LINE webhook body")
    events = request.get("events")
    if not isinstance(events, list):
        raise InvalidInputError("events must be a list", field="events")
    if len(events) > MAX_EVENTS:
        raise InvalidInputError(f"more than {MAX_EVENTS} events in one request")
    destination = request.get("destination")
    parsed = [
        ParsedEvent(provider_event_id(e), {"destination": destination, "event": e}) for e in events
    ]
    for event in events:  # all objects with an id by now
        check_fresh(event, options, now)
    return parsed


ADAPTER = Adapter(CHANNEL_TYPE, AuthKind.SECRET, authenticate, parse)
