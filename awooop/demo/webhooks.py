"""Realistic deliveries for the demo, signed as each provider signs them.

Payload shapes follow the providers' published webhook formats (Telegram ``Update``,
Alertmanager webhook version 4, Gitea push, LINE Messaging API webhook, plain API JSON).
LINE events are stamped with the current time (the server refuses events older than the
channel's ``max_event_age_s``); a Gitea push is keyed by the hash of its signed payload.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from awooop.ingest.auth import gitea_signature, line_signature

SECRETS = {
    "telegram": "demo-telegram-secret-token",
    "gitea": "demo gitea webhook secret",
    "line": "0123456789abcdef0123456789abcdef",
}


@dataclass(frozen=True)
class Delivery:
    channel: str
    body: bytes
    headers: dict[str, str]
    key: str
    contract: str | None = None  # the agent contract (``?contract_id=``); None: ``default``


def _json(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


def telegram(update_id: int, text: str) -> Delivery:
    body = _json(
        {
            "update_id": update_id,
            "message": {
                "message_id": update_id % 100000,
                "from": {"id": 424242, "is_bot": False, "first_name": "Oncall"},
                "chat": {"id": 424242, "type": "private", "first_name": "Oncall"},
                "date": 1764400000,
                "text": text,
            },
        }
    )
    headers = {"X-Telegram-Bot-Api-Secret-Token": SECRETS["telegram"]}
    return Delivery("telegram", body, headers, str(update_id))


def alertmanager(token: str, n: int) -> Delivery:
    alerts = [
        {
            "status": "firing",
            "labels": {
                "alertname": "HighLatency",
                "instance": f"api-{n}-{i}:9100",
                "severity": "page",
            },
            "annotations": {"summary": f"p99 latency above 2s on api-{n}"},
            "startsAt": "2026-11-29T04:12:09.123Z",
            "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus.example:9090/graph",
            "fingerprint": f"{n:08x}{i:08x}",
        }
        for i in range(2)
    ]
    body = _json(
        {
            "version": "4",
            "groupKey": f'{{}}:{{alertname="HighLatency",n="{n}"}}',
            "truncatedAlerts": 0,
            "status": "firing",
            "receiver": "awooop",
            "groupLabels": {"alertname": "HighLatency"},
            "commonLabels": {"severity": "page"},
            "commonAnnotations": {"summary": "p99 latency above 2s"},
            "externalURL": "http://alertmanager.example:9093",
            "alerts": alerts,
        }
    )
    return Delivery("alertmanager", body, {"Authorization": f"Bearer {token}"}, f"am-{n}")


def gitea(n: int) -> Delivery:
    body = _json(
        {
            "ref": "refs/heads/main",
            "before": "0" * 40,
            "after": f"{n:040x}",
            "commits": [
                {
                    "id": f"{n:040x}",
                    "message": f"Raise the api timeout ({n})\n",
                    "author": {"name": "ops", "email": "ops@example.com"},
                }
            ],
            "repository": {"id": 140, "name": "infra", "full_name": "ops/infra"},
            "pusher": {"login": "ops"},
            "sender": {"login": "ops"},
        }
    )
    delivery_id = str(uuid.uuid4())
    headers = {
        "X-Gitea-Delivery": delivery_id,
        "X-Gitea-Event": "push",
        "X-Gitea-Signature": gitea_signature(SECRETS["gitea"], body),
    }
    return Delivery("gitea", body, headers, "sha256:" + hashlib.sha256(body).hexdigest())


def line(n: int, events: int = 2) -> Delivery:
    sent_ms = int(time.time() * 1000)
    body = _json(
        {
            "destination": "U8e742f61d673b39c7fff3cecb7536ef0",
            "events": [
                {
                    "type": "message",
                    "message": {"type": "text", "id": f"{n}{i}", "text": f"is api-{n} healthy?"},
                    "webhookEventId": f"01DEMO{n:06d}{i:02d}",
                    "deliveryContext": {"isRedelivery": False},
                    "timestamp": sent_ms + i,
                    "source": {"type": "user", "userId": "U80696558e1aa831d1b0d6f4f5c7c9a1e"},
                    "replyToken": uuid.uuid4().hex,
                    "mode": "active",
                }
                for i in range(events)
            ],
        }
    )
    headers = {"X-Line-Signature": line_signature(SECRETS["line"], body)}
    return Delivery("line", body, headers, f"line-{n}")


def api(
    token: str, payload: dict[str, Any], key: str | None = None, contract: str | None = None
) -> Delivery:
    key = key or str(uuid.uuid4())
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": key}
    return Delivery("api", _json(payload), headers, key, contract)
