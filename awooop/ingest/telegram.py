"""Telegram Bot API webhooks.

Telegram POSTs one ``Update`` object per request (``{"update_id": 1000, "message": {...}}``)
and, when the webhook was set with ``secret_token``, sends that token in the header
``X-Telegram-Bot-Api-Secret-Token``. The run's input is the update as received.

**What is signed**: nothing. The header is a shared secret compared as a whole, so whoever
sees one request (the secret travels in it) can send any update; only TLS and the secret
protect the channel, and Telegram signs no time, so there is no freshness bound.

**What keys the event** (R-02): ``update_id``. Telegram retries an undelivered update with
the same ``update_id``, so a retry, or a captured request posted again, is a duplicate within
the dedupe window (200 ``E-IDEMPOTENT-001``) and a new run after it.
"""

from __future__ import annotations

from typing import Any

from awooop.core.errors import AuthenticationError, InvalidInputError, MissingEventIdError
from awooop.ingest.auth import AUTH_FAILED, equal, require_header, require_secret
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

CHANNEL_TYPE = "telegram"
SECRET_HEADER = "x-telegram-bot-api-secret-token"


def authenticate(headers: Headers, _body: bytes, stored: StoredCredential) -> None:
    presented = require_header(headers, SECRET_HEADER)
    if not equal(presented, require_secret(stored)):
        raise AuthenticationError(AUTH_FAILED)


def provider_event_id(update: dict[str, Any]) -> str:
    value = update.get("update_id")
    if value is None:
        raise MissingEventIdError("missing update_id", field="update_id")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInputError("update_id must be a non-negative integer", field="update_id")
    return event_id(value, "update_id")


def parse(
    _headers: Headers, body: bytes, _options: ChannelOptions, _now: float
) -> list[ParsedEvent]:
    update = decode_object(body, "Telegram update")
    return [ParsedEvent(provider_event_id(update), update)]


ADAPTER = Adapter(CHANNEL_TYPE, AuthKind.SECRET, authenticate, parse)
