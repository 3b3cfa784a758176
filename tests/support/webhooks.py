"""Realistic webhook deliveries for every channel, signed as the providers sign them.

Payloads follow each provider's published webhook documentation (Telegram Bot API
``Update``, Alertmanager ``webhook_config`` version 4, Gitea push event, LINE Messaging API
webhook, and the plain API channel). ``Delivery`` objects carry the raw body and the headers
a provider sends; ``sign`` adds the channel's proof, computed over what the provider signs.

Gitea is built the way its ``services/webhook/deliver.go`` builds a delivery, because the
difference matters: the payload is Go's ``json.MarshalIndent(p, "", "  ")`` (``<``, ``>``
and ``&`` escaped as ``\\u003c`` ...), the signature is the HMAC of that JSON text, and a form
delivery's body is ``payload=`` + the JSON encoded like Go's ``url.Values.Encode`` (so the
body is NOT what is signed). LINE events carry the current time as their ``timestamp``.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote_plus

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
            "message": "Raise the api timeout <30s> & retry: café\n",
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


GITEA_FORM = "application/x-www-form-urlencoded"


def go_json(payload: Any) -> bytes:
    """``payload`` as Go's ``json.MarshalIndent(p, "", "  ")`` writes it: two-space indent,
    UTF-8 kept, and ``<``, ``>``, ``&`` (which occur only inside strings) escaped."""
    text = json.dumps(payload, indent=2, ensure_ascii=False)
    for char, escaped in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e")):
        text = text.replace(char, escaped)
    return text.encode()


def go_form(fields: dict[str, bytes]) -> bytes:
    """Go's ``url.Values.Encode``: keys sorted, ``+`` for space, ``%XX`` (upper case) for each
    byte outside ``A-Z a-z 0-9 - _ . ~``; Python's quote_plus keeps exactly that set."""
    return "&".join(f"{quote_plus(k)}={quote_plus(v)}" for k, v in sorted(fields.items())).encode()


@dataclass
class Delivery:
    channel: str
    payload: Any
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None  # overrides the provider's JSON encoding of payload

    @property
    def content(self) -> bytes:
        """The provider's JSON text of the payload (for Gitea: what it signs)."""
        if self.raw is not None:
            return self.raw
        return (
            go_json(self.payload) if self.channel == "gitea" else json.dumps(self.payload).encode()
        )

    @property
    def form(self) -> bool:
        return self.headers.get("Content-Type") == GITEA_FORM

    @property
    def body(self) -> bytes:
        return go_form({"payload": self.content}) if self.form else self.content

    @property
    def path(self) -> str:
        return f"/v1/projects/{PROJECT}/channels/{self.channel}"

    def ids(self, gitea_key: str = "body") -> list[str]:
        """The provider event ids this delivery should be deduplicated on."""
        if self.channel == "telegram":
            return [str(self.payload["update_id"])]
        if self.channel == "gitea" and gitea_key == "delivery":
            return [self.headers["X-Gitea-Delivery"]]
        if self.channel == "gitea":
            return ["sha256:" + hashlib.sha256(self.content).hexdigest()]
        if self.channel == "line":
            return [e["webhookEventId"] for e in self.payload["events"]]
        if self.channel == "api":
            return [self.headers["Idempotency-Key"]]
        from awooop.ingest.alertmanager import provider_event_id

        return [provider_event_id(self.payload)]


def sign(delivery: Delivery, credential: str) -> Delivery:
    """Add the channel's proof: secret header, HMAC signature or bearer token."""
    if delivery.channel == "telegram":
        delivery.headers["X-Telegram-Bot-Api-Secret-Token"] = credential
    elif delivery.channel == "gitea":  # over the JSON, whether the body is JSON or a form
        signature = gitea_signature(credential, delivery.content)
        sha1 = hmac.new(credential.encode(), delivery.content, hashlib.sha1).hexdigest()
        delivery.headers |= {
            "X-Gitea-Signature": signature,
            "X-Gogs-Signature": signature,
            "X-Hub-Signature": f"sha1={sha1}",
            "X-Hub-Signature-256": f"sha256={signature}",
        }
    elif delivery.channel == "line":
        delivery.headers["X-Line-Signature"] = line_signature(credential, delivery.body)
    else:
        delivery.headers["Authorization"] = f"Bearer {credential}"
    return delivery


def gitea_headers(delivery_id: str, event: str = "push", form: bool = False) -> dict[str, str]:
    """The headers Gitea sends besides its signatures (deliver.go's addDefaultHeaders)."""
    return {
        "Content-Type": GITEA_FORM if form else "application/json",
        "User-Agent": "Go-http-client/1.1",
        "X-Gitea-Delivery": delivery_id,
        "X-Gitea-Event": event,
        "X-Gitea-Event-Type": event,
        "X-Gogs-Delivery": delivery_id,
        "X-Gogs-Event": event,
        "X-Gogs-Event-Type": event,
        "X-GitHub-Delivery": delivery_id,
        "X-GitHub-Event": event,
        "X-GitHub-Event-Type": event,
    }


def replay(delivery: Delivery) -> Delivery:
    """What Gitea's "replay" sends: the same stored payload under a new X-Gitea-Delivery."""
    new_id = str(uuid.uuid4())
    headers = dict(delivery.headers)
    headers |= {k: new_id for k in ("X-Gitea-Delivery", "X-Gogs-Delivery", "X-GitHub-Delivery")}
    return Delivery(delivery.channel, copy.deepcopy(delivery.payload), headers, delivery.raw)


def fresh(channel: str, events: int = 2, unique: str | None = None, form: bool = False) -> Delivery:
    """A realistic, unsigned delivery of ``channel`` with fresh provider ids (from ``unique``,
    32 hex digits, random by default; LINE gets ``events`` events stamped now; Gitea a push
    whose payload names ``unique``, as JSON or with ``form`` as Gitea's form body)."""
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
        payload = copy.deepcopy(GITEA_PUSH)
        payload["after"] = unique + unique[:8]  # a new commit: a new event
        return Delivery(channel, payload, gitea_headers(str(uuid.UUID(unique)), form=form))
    if channel == "line":
        payload = copy.deepcopy(LINE_WEBHOOK)
        template = payload["events"]
        now_ms = int(time.time() * 1000)
        payload["events"] = [
            {
                **copy.deepcopy(template[i % len(template)]),
                "webhookEventId": f"01{unique}{i:02d}",
                "timestamp": now_ms,
            }
            for i in range(events)
        ]
        return Delivery(channel, payload, headers)
    assert channel == "api", channel
    headers["Idempotency-Key"] = f"req-{unique}"
    return Delivery(channel, copy.deepcopy(API_REQUEST), headers)
