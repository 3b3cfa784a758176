"""Telegram Bot API webhooks.

Telegram POSTs one ``Update`` object per request (``{"update_id": 1000, "message": {...}}``)
and, when the webhook was set with ``secret_token``, sends that token in the header
``X-Telegram-Bot-Api-Secret-Token``. ``provider_event_id`` is ``update_id`` (R-02); the run's
input is the update as received.
"""

from __future__ import annotations

from typing import Any

from awooop.errors import AuthenticationError, InvalidInputError, MissingEventIdError
from awooop.ingest.auth import AUTH_FAILED, equal, require_header, require_secret
from awooop.ingest.common import (
    Adapter,
    AuthKind,
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


def parse(_headers: Headers, body: bytes) -> list[ParsedEvent]:
    update = decode_object(body, "Telegram update")
    return [ParsedEvent(provider_event_id(update), update)]


ADAPTER = Adapter(CHANNEL_TYPE, AuthKind.SECRET, authenticate, parse)
