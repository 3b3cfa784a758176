"""Domain events (R-06): an event of the caller's own domain, checked before the producer
appends it to the project's domain stream (:func:`awooop.producer.emit`)."""

from __future__ import annotations

import re
import uuid
from typing import Any

import msgspec

from awooop.core.errors import InvalidInputError, PayloadTooLargeError
from awooop.core.events import DOMAIN_PREFIX, EVENT_TYPES
from awooop.eventlog.eventlog import RawEvent
from awooop.ingest.common import check_storable

_json_encode = msgspec.json.Encoder().encode

DOMAIN_STREAM_PREFIX = DOMAIN_PREFIX
STREAM_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,200}")
DOMAIN_EVENT_TYPE = re.compile(r"[A-Z][A-Za-z0-9_]{0,99}")
RUNTIME_EVENT_TYPES = frozenset(t.__name__ for t in EVENT_TYPES)


class DomainEvent(msgspec.Struct, frozen=True):
    """An event of the caller's own domain (an order placed, an invoice paid): appended to
    the project's stream ``stream`` of the event log, published by the relay to the events
    streams like every event, and never dispatched to workers."""

    stream: str
    event_type: str
    data: dict[str, Any]


class Emitted(msgspec.Struct, frozen=True):
    stream_id: str
    event_id: uuid.UUID
    version: int
    position: int


def domain_stream_id(project_id: str, stream: str) -> str:
    """The event log's stream id of a project's domain stream (``/`` is in neither name)."""
    return f"{DOMAIN_STREAM_PREFIX}{project_id}/{stream}"


def check_domain_event(event: DomainEvent, max_bytes: int) -> RawEvent:
    """Pure: the event as the log stores it, or InvalidInputError / PayloadTooLargeError."""
    if not isinstance(event.stream, str) or not STREAM_NAME.fullmatch(event.stream):
        raise InvalidInputError(
            "a domain stream name is 1-200 characters of letters, digits and _ . : -"
        )
    if not isinstance(event.event_type, str) or not DOMAIN_EVENT_TYPE.fullmatch(event.event_type):
        raise InvalidInputError(
            "a domain event type is 1-100 letters, digits and _, starting with a capital letter"
        )
    if event.event_type in RUNTIME_EVENT_TYPES:
        raise InvalidInputError(
            f"{event.event_type} is one of the runtime's own event types; name it otherwise"
        )
    if not isinstance(event.data, dict):
        raise InvalidInputError("a domain event's data is a JSON object")
    try:
        raw = _json_encode(event.data)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidInputError(f"the event data is not JSON-serialisable: {exc}") from None
    if len(raw) > max_bytes:
        raise PayloadTooLargeError(
            f"the event data has {len(raw)} bytes, more than {max_bytes} "
            "(AWOOOP_HTTP_MAX_BODY_BYTES)"
        )
    check_storable(event.data, raw)
    return RawEvent(event.event_type, raw.decode())
