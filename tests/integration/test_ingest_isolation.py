"""One poisoned delivery among good ones on the HTTP ingest route (real Postgres, in-process
ASGI client): the good deliveries are accepted, the bad one gets a coded error and nothing of
it is written. Refused when parsed (the usual path), and when only Postgres refuses it: then
the batch's statement fails and the group commit writes each delivery alone."""

from __future__ import annotations

import asyncio
import json

import pytest
from structlog.testing import capture_logs

from awooop.ingest import common
from tests.support.ingest import Ingest, ingest
from tests.support.webhooks import fresh

__all__ = ["ingest"]  # the fixture, imported from tests.support.ingest

GOOD = 20


async def dedupe_rows(ingest: Ingest, key: str) -> int:
    async with ingest.db.platform() as conn:
        found: int = await conn.fetchval(
            "SELECT count(*) FROM awooop_channel_event_dedupe WHERE provider_event_id = $1", key
        )
        return found


async def post_all(ingest: Ingest) -> tuple[list[int], dict[str, object], str]:
    """A warm-up delivery (the config cache), then GOOD good ones and the bad one at once:
    the good ones' statuses, the bad one's answer (with its status) and its key."""
    assert (await ingest.post(fresh("api"))).status_code == 202
    bad = fresh("api")
    bad.raw = json.dumps({"task": "summarise", "log": "line one\u0000line two"}).encode()
    assert b"\\u0000" in bad.raw
    goods = [fresh("api") for _ in range(GOOD)]
    deliveries = [*goods[: GOOD // 2], bad, *goods[GOOD // 2 :]]
    responses = await asyncio.gather(*(ingest.post(d) for d in deliveries))
    statuses = []
    for delivery, response in zip(deliveries, responses, strict=True):
        if delivery is bad:
            answer = response.json() | {"status": response.status_code}
        else:
            statuses.append(response.status_code)
            assert response.json()["results"][0]["provider_event_id"] == delivery.ids()[0]
    return statuses, answer, bad.ids()[0]


async def test_a_delivery_with_text_postgres_cannot_store_is_refused_when_parsed(
    ingest: Ingest,
) -> None:
    statuses, answer, key = await post_all(ingest)
    assert statuses == [202] * GOOD
    assert answer["status"] == 400 and answer["code"] == "E-INPUT-001"
    assert "body['log']: text 'line one\\x00line two' contains \\u0000" in str(answer["message"])
    assert await dedupe_rows(ingest, key) == 0


async def test_a_delivery_only_postgres_refuses_fails_alone_in_its_batch(
    ingest: Ingest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(common, "check_storable", lambda *_args, **_kw: None)
    with capture_logs() as logs:
        statuses, answer, key = await post_all(ingest)
    assert statuses == [202] * GOOD
    assert answer["status"] == 422 and answer["code"] == "E-DATA-001"
    message = str(answer["message"])
    assert message.startswith("the delivery could not be stored: UntranslatableCharacterError")
    assert "\\u0000" in message
    assert await dedupe_rows(ingest, key) == 0
    # The bad delivery really shared a statement with good ones, which then went alone.
    isolated = [e for e in logs if e["event"] == "batch_isolated"]
    assert isolated and all(e["items"] >= 2 for e in isolated), logs
