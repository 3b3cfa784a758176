"""Prometheus Alertmanager webhooks (``webhook_config``, payload version 4).

Alertmanager POSTs one notification per alert group::

    {"version": "4", "groupKey": "{}:{alertname=\\"HighLatency\\"}", "status": "firing",
     "receiver": "awooop", "groupLabels": {...}, "commonLabels": {...}, "externalURL": "...",
     "alerts": [{"status": "firing", "labels": {...}, "annotations": {...},
                 "startsAt": "...", "endsAt": "...", "fingerprint": "c4b0..."}], ...}

and authenticates with ``http_config.authorization`` (``Authorization: Bearer <token>``; the
token comes from ``awooop tokens create PROJECT --channel alertmanager``). **Nothing is
signed**: whoever sees one request has the token and can send any notification; only TLS and
the token protect the channel, and there is no signed time to bound.

``provider_event_id`` (R-02) is the sha256 of ``groupKey`` with the sorted alert fingerprints.
Each fingerprint is taken together with the alert's ``status`` and ``startsAt``: a group's
"resolved" notification, or an alert that fires again after it resolved, is a new event for
the operator and must not be swallowed as a repeat of the first "firing" notification, while
Alertmanager's retries and ``repeat_interval`` re-sends of an unchanged group hash the same,
as does a captured request posted again: a duplicate within the dedupe window (200
``E-IDEMPOTENT-001``), a new run after it.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from awooop.core.errors import InvalidInputError, MissingEventIdError
from awooop.ingest.auth import authenticate_bearer
from awooop.ingest.common import (
    Adapter,
    AuthKind,
    ChannelOptions,
    Headers,
    ParsedEvent,
    decode_object,
)

CHANNEL_TYPE = "alertmanager"
_encode = msgspec.json.Encoder(order="sorted").encode


def provider_event_id(notification: dict[str, Any]) -> str:
    group_key = notification.get("groupKey")
    if group_key is None or group_key == "":
        raise MissingEventIdError("missing groupKey", field="groupKey")
    if not isinstance(group_key, str):
        raise InvalidInputError("groupKey must be a string", field="groupKey")
    alerts = notification.get("alerts")
    if not isinstance(alerts, list) or not alerts:
        raise InvalidInputError("alerts must be a non-empty list", field="alerts")
    keys: list[tuple[str, str, str]] = []
    for alert in alerts:
        if not isinstance(alert, dict):
            raise InvalidInputError("each alert must be an object", field="alerts")
        fingerprint = alert.get("fingerprint")
        if not isinstance(fingerprint, str) or not fingerprint:
            raise MissingEventIdError("an alert has no fingerprint", field="fingerprint")
        status = alert.get("status")
        starts_at = alert.get("startsAt")
        keys.append(
            (
                fingerprint,
                status if isinstance(status, str) else "",
                starts_at if isinstance(starts_at, str) else "",
            )
        )
    digest = hashlib.sha256(_encode([group_key, sorted(keys)])).hexdigest()
    return f"am-{digest}"


def parse(
    _headers: Headers, body: bytes, _options: ChannelOptions, _now: float
) -> list[ParsedEvent]:
    notification = decode_object(body, "Alertmanager notification")
    return [ParsedEvent(provider_event_id(notification), notification)]


ADAPTER = Adapter(CHANNEL_TYPE, AuthKind.BEARER, authenticate_bearer, parse)
