"""What every channel adapter shares: the adapter shape, the parsed event, JSON checks.

An adapter is two pure functions over a delivery (lowercase header names and the raw body):
``authenticate(headers, body, stored)`` raises :class:`~awooop.core.errors.AuthenticationError`
unless the delivery carries the provider's proof (a secret header, an HMAC of what the provider
signs, or a bearer token); ``parse(headers, body, options, now)`` returns the events of the
delivery, each with its ``provider_event_id`` (R-02), or raises :class:`InvalidInputError` (400)
/ :class:`MissingEventIdError` (422) / :class:`~awooop.core.errors.StaleDeliveryError` (403, an
event older than the channel's bound, where the provider signs a time). ``options`` are the
project's per-channel settings (:class:`ChannelOptions`), ``now`` the wall clock in seconds. No
I/O: the HTTP layer and the tests call them alike.

Bodies end up in ``jsonb`` columns, which cannot hold every JSON text msgspec accepts: a
string with ``\\u0000`` is refused by Postgres, and very deep nesting may exhaust a stack on
either side. :func:`decode_object` refuses both up front (400), so that a malformed body
never reaches the database as a 500.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from awooop.core import storable
from awooop.core.errors import InvalidInputError, MissingEventIdError

Headers = Mapping[str, str]  # lowercase header name -> value

CHANNEL_TYPES = ("telegram", "alertmanager", "gitea", "line", "api")
MAX_EVENT_ID_LENGTH = 256  # the CHECK on awooop_channel_event_dedupe.provider_event_id
MAX_JSON_DEPTH = 64


GITEA_KEYS = ("body", "delivery")


class AuthKind(enum.StrEnum):
    SECRET = "secret"  # a per-project channel secret (awooop channels set-secret)
    BEARER = "bearer"  # a per-project bearer token (awooop tokens create)


class ParsedEvent(msgspec.Struct, frozen=True):
    """One event of a delivery: its idempotency id and the run's input."""

    provider_event_id: str
    input: Any


class StoredCredential(msgspec.Struct, frozen=True):
    """What the database holds for the delivery's project and channel (None: nothing)."""

    secret: str | None = None
    token_hash: str | None = None


class ChannelOptions(msgspec.Struct, frozen=True, kw_only=True):
    """A project's settings of one channel that change how its deliveries are read
    (``awooop channels set-option``; a column left NULL in awooop_channels is the default
    here). Each applies to one channel type and is ignored by the others."""

    gitea_key: str = "body"  # gitea: "body" (sha256 of the signed payload) or "delivery"
    max_event_age_s: int = 3600  # line: an event older than this is refused
    max_redelivery_age_s: int = 86400  # line: the same for an event LINE flags as redelivered


DEFAULT_OPTIONS = ChannelOptions()


@dataclass(frozen=True)
class Adapter:
    channel_type: str
    auth: AuthKind
    authenticate: Callable[[Headers, bytes, StoredCredential], None]
    parse: Callable[[Headers, bytes, ChannelOptions, float], list[ParsedEvent]]


_decode = msgspec.json.Decoder().decode


def decode_object(body: bytes, what: str = "body") -> dict[str, Any]:
    """The body as a JSON object that Postgres can store, or :class:`InvalidInputError`."""
    try:
        value = _decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError):
        raise InvalidInputError(f"{what} is not valid JSON") from None
    if not isinstance(value, dict):
        raise InvalidInputError(f"{what} must be a JSON object")
    check_storable(value, body, what)
    return value


def check_storable(value: Any, raw: bytes | None = None, where: str = "the JSON body") -> None:
    """Refuse what Postgres cannot store (:func:`awooop.core.storable.problem`: NUL, lone
    surrogates) and nesting deeper than MAX_JSON_DEPTH, naming the place. ``raw`` (the
    value's JSON, which msgspec decodes only without lone surrogates) lets the common case skip
    the walk: without enough brackets there is no deep nesting, and without the escape
    ``\\u0000`` there is no NUL."""
    if raw is not None and (
        raw.count(b"[") + raw.count(b"{") <= MAX_JSON_DEPTH and b"\\u0000" not in raw
    ):
        return
    found = storable.problem(value, where, max_depth=MAX_JSON_DEPTH)
    if found is not None:
        raise InvalidInputError(found)


def event_id(value: object, field: str) -> str:
    """A provider event id as text: present, 1..256 characters, valid UTF-8, printable."""
    if value is None or value == "":
        raise MissingEventIdError(f"missing {field}", field=field)
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InvalidInputError(f"{field} must be a string or an integer", field=field)
    text = str(value)
    if len(text) > MAX_EVENT_ID_LENGTH:
        raise InvalidInputError(
            f"{field} is longer than {MAX_EVENT_ID_LENGTH} characters", field=field
        )
    if any("\ud800" <= c <= "\udfff" for c in text):  # header bytes that were not UTF-8
        raise InvalidInputError(f"{field} is not valid UTF-8", field=field)
    if not text.isprintable():
        raise InvalidInputError(f"{field} contains control characters", field=field)
    return text
