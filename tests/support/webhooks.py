"""Realistic webhook deliveries for every channel, signed as the providers sign them.

Payloads follow each provider's published webhook documentation (Telegram Bot API
``Update``, Alertmanager ``webhook_config`` version 4, Gitea push event, LINE Messaging API
webhook, and the plain API channel). ``Delivery`` objects carry the raw body and the headers
a provider sends; ``sign`` adds the channel's proof.
"""

from __future__ import annotations

import copy
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from awooop.ingest.auth import gitea_signature, line_signature

PROJECT = "p1"
OTHER_PROJECT = "p2"
SECRETS = {
    "telegram": "tg-Secret_token-1234",
    "gitea": "gitea webhook secret",
    "line": "0123456789abcdef0123456789abcdef",
}
SECRET_CHANNELS = tuple(SECRETS)
BEARER_CHANNELS = ("alertmanager", "api")
CHANNELS = ("telegram", "alertmanager", "gitea", "line", "api")

TELEGRAM_UPDATE: dict[str, Any] = {
    "update_id": 10000,
    "message": {
        "message_id": 1365,
        "from": {
            "id": 1111111,
            "is_bot": False,
            "first_name": "Test",
            "last_name": "Lastname",
            "username": "Test",
            "language_code": "en",
        },
        "chat": {
            "id": 1111111,
            "first_name": "Test",
            "last_name": "Lastname",
            "username": "Test",
            "type": "private",
        },
        "date": 1441645532,
        "text": "/status api-gateway",
    },
}

ALERTMANAGER_NOTIFICATION: dict[str, Any] = {
    "version": "4",
    "groupKey": '{}/{severity="page"}:{alertname="HighLatency"}',
    "truncatedAlerts": 0,
    "status": "firing",
    "receiver": "awooop",
    "groupLabels": {"alertname": "HighLatency"},
    "commonLabels": {"alertname": "HighLatency", "job": "api", "severity": "page"},
    "commonAnnotations": {"summary": "p99 latency above 2s"},
    "externalURL": "http://alertmanager.example:9093",
    "alerts": [
        {
            "status": "firing",
            "labels": {
                "alertname": "HighLatency",
                "instance": "api-1:9100",
                "job": "api",
                "severity": "page",
            },
            "annotations": {"summary": "p99 latency above 2s"},
            "startsAt": "2026-05-03T04:12:09.123Z",
            "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus.example:9090/graph?g0.expr=latency_p99+%3E+2",
            "fingerprint": "c4b0a5a1e8d1b2f3",
        },
        {
            "status": "firing",
            "labels": {
                "alertname": "HighLatency",
                "instance": "api-2:9100",
                "job": "api",
                "severity": "page",
            },
            "annotations": {"summary": "p99 latency above 2s"},
            "startsAt": "2026-05-03T04:12:39.001Z",
            "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus.example:9090/graph?g0.expr=latency_p99+%3E+2",
            "fingerprint": "0a1b2c3d4e5f6a7b",
        },
    ],
}

GITEA_PUSH: dict[str, Any] = {
    "ref": "refs/heads/develop",
    "before": "28e1879d029cb852e4844d9c718537df08844e03",
    "after": "bffeb74224043ba2feb48d137756c8a9331c449a",
    "compare_url": "http://gitea.example/ops/webhooks/compare/28e1879d...bffeb742",
    "commits": [
        {
            "id": "bffeb74224043ba2feb48d137756c8a9331c449a",
            "message": "Raise the api timeout\n",
            "url": "http://gitea.example/ops/webhooks/commit/bffeb742",
            "author": {"name": "Gitea", "email": "someone@gitea.io", "username": "gitea"},
            "committer": {"name": "Gitea", "email": "someone@gitea.io", "username": "gitea"},
            "timestamp": "2026-05-03T13:52:11+08:00",
        }
    ],
    "repository": {
        "id": 140,
        "owner": {"id": 1, "login": "ops", "full_name": "Ops", "username": "ops"},
        "name": "webhooks",
        "full_name": "ops/webhooks",
        "private": False,
        "html_url": "http://gitea.example/ops/webhooks",
        "default_branch": "main",
    },
    "pusher": {"id": 1, "login": "gitea", "username": "gitea"},
    "sender": {"id": 1, "login": "gitea", "username": "gitea"},
}

LINE_WEBHOOK: dict[str, Any] = {
    "destination": "U8e742f61d673b39c7fff3cecb7536ef0",
    "events": [
        {
            "type": "message",
            "message": {
                "type": "text",
                "id": "14353798921116",
                "quoteToken": "q3Plxr4AgKd...",
                "text": "Is the api healthy?",
            },
            "webhookEventId": "01FZ74A0TDDPYRVKNK77XKC3ZR",
            "deliveryContext": {"isRedelivery": False},
            "timestamp": 1625665242211,
            "source": {"type": "user", "userId": "U80696558e1aa831d1b0d6f4f5c7c9a1e"},
            "replyToken": "757913772c4646b784d4b7ce46d12671",
            "mode": "active",
        },
        {
            "type": "follow",
            "webhookEventId": "01FZ74ASS536FW97EX38NKCZQK",
            "deliveryContext": {"isRedelivery": False},
            "timestamp": 1625665242214,
            "source": {"type": "user", "userId": "Ufc729a925b3abef5d4b1f3a1e7c5d2b9"},
            "replyToken": "bb173f4d9cf64aed9d408ab4e36339ad",
            "mode": "active",
        },
    ],
}

API_REQUEST: dict[str, Any] = {"task": "summarise incident INC-42", "priority": "high"}


@dataclass
class Delivery:
    channel: str
    payload: Any
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None  # overrides the JSON encoding of payload

    @property
    def body(self) -> bytes:
        return self.raw if self.raw is not None else json.dumps(self.payload).encode()

    @property
    def path(self) -> str:
        return f"/v1/projects/{PROJECT}/channels/{self.channel}"

    def ids(self) -> list[str]:
        """The provider event ids this delivery should be deduplicated on."""
        if self.channel == "telegram":
            return [str(self.payload["update_id"])]
        if self.channel == "gitea":
            return [self.headers["X-Gitea-Delivery"]]
        if self.channel == "line":
            return [e["webhookEventId"] for e in self.payload["events"]]
        if self.channel == "api":
            return [self.headers["Idempotency-Key"]]
        from awooop.ingest.alertmanager import provider_event_id

        return [provider_event_id(self.payload)]


def sign(delivery: Delivery, credential: str) -> Delivery:
    """Add the channel's proof: secret header, HMAC signature or bearer token."""
    body = delivery.body
    if delivery.channel == "telegram":
        delivery.headers["X-Telegram-Bot-Api-Secret-Token"] = credential
    elif delivery.channel == "gitea":
        delivery.headers["X-Gitea-Signature"] = gitea_signature(credential, body)
    elif delivery.channel == "line":
        delivery.headers["X-Line-Signature"] = line_signature(credential, body)
    else:
        delivery.headers["Authorization"] = f"Bearer {credential}"
    return delivery


def fresh(channel: str, events: int = 2, unique: str | None = None) -> Delivery:
    """A realistic, unsigned delivery of ``channel`` with fresh provider ids (from ``unique``,
    32 hex digits, random by default; LINE gets ``events`` events)."""
    unique = unique or uuid.uuid4().hex
    headers = {"Content-Type": "application/json", "User-Agent": f"{channel}-test"}
    if channel == "telegram":
        payload = copy.deepcopy(TELEGRAM_UPDATE)
        payload["update_id"] = int(unique[:12], 16)
        return Delivery(channel, payload, headers)
    if channel == "alertmanager":
        payload = copy.deepcopy(ALERTMANAGER_NOTIFICATION)
        payload["groupKey"] += f"/{unique}"
        return Delivery(channel, payload, headers)
    if channel == "gitea":
        headers |= {"X-Gitea-Delivery": str(uuid.UUID(unique)), "X-Gitea-Event": "push"}
        return Delivery(channel, copy.deepcopy(GITEA_PUSH), headers)
    if channel == "line":
        payload = copy.deepcopy(LINE_WEBHOOK)
        template = payload["events"]
        payload["events"] = [
            {**copy.deepcopy(template[i % len(template)]), "webhookEventId": f"01{unique}{i:02d}"}
            for i in range(events)
        ]
        return Delivery(channel, payload, headers)
    assert channel == "api", channel
    headers["Idempotency-Key"] = f"req-{unique}"
    return Delivery(channel, copy.deepcopy(API_REQUEST), headers)
