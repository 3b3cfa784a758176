"""The ingest service used directly, without a web framework: webhooks and producer events
through one :class:`Ingestor` on real Postgres."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from prometheus_client import REGISTRY

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import AuthenticationError, UnknownChannelError
from awooop.core.sessions import TenantSessions
from awooop.ingest import credentials, ingest_write, submission
from awooop.ingest.service import Ingestor
from awooop.ingest.submission import ChannelEvent
from tests.support.ingest import counts
from tests.support.webhooks import PROJECT, Delivery, fresh, sign


@pytest.fixture
async def ingestor(settings: Settings, db: Database) -> AsyncIterator[Ingestor]:
    sessions = TenantSessions(settings.database_url, 4)
    try:
        yield Ingestor(settings, sessions)
    finally:
        await sessions.close()


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def receive(ingestor: Ingestor, delivery: Delivery) -> list[ingest_write.Outcome]:
    async def body() -> bytes:
        return delivery.body

    headers = {k.lower(): v for k, v in delivery.headers.items()}
    return await ingestor.receive(delivery.channel, PROJECT, "default", headers, body)


async def test_a_webhook_creates_runs_a_repeat_returns_them_and_both_are_counted(
    ingestor: Ingestor, db: Database
) -> None:
    _, token = await credentials.create_token(db, PROJECT, "api")
    delivery = sign(fresh("api"), token)
    created = metric("awooop_ingest_events_total", channel_type="api", outcome="created")
    duplicate = metric("awooop_ingest_events_total", channel_type="api", outcome="duplicate")

    [first] = await receive(ingestor, delivery)
    [again] = await receive(ingestor, delivery)

    assert first.created and not again.created
    assert (again.run_id, again.provider_event_id) == (first.run_id, first.provider_event_id)
    assert metric("awooop_ingest_events_total", channel_type="api", outcome="created") == (
        created + 1
    )
    assert metric("awooop_ingest_events_total", channel_type="api", outcome="duplicate") == (
        duplicate + 1
    )
    async with db.tenant(PROJECT) as conn:
        status = await conn.fetchval(
            "SELECT status FROM awooop_run_state WHERE run_id = $1", first.run_id
        )
    assert status == "PENDING"


async def test_refusals_are_raised_counted_and_write_nothing(
    ingestor: Ingestor, db: Database
) -> None:
    await credentials.set_secret(db, PROJECT, "telegram", "the-right-secret")
    before = await counts(db)
    rejected = metric("awooop_ingest_events_total", channel_type="telegram", outcome="rejected")
    unknown = metric("awooop_ingest_events_total", channel_type="unknown", outcome="rejected")

    with pytest.raises(AuthenticationError):
        await receive(ingestor, sign(fresh("telegram"), "a-wrong-secret"))
    with pytest.raises(UnknownChannelError):
        await receive(ingestor, Delivery("fax", {}))

    assert await counts(db) == before
    assert metric("awooop_ingest_events_total", channel_type="telegram", outcome="rejected") == (
        rejected + 1
    )
    assert metric("awooop_ingest_events_total", channel_type="unknown", outcome="rejected") == (
        unknown + 1
    )


async def test_concurrent_webhooks_share_statements_and_keep_their_own_outcomes(
    ingestor: Ingestor, db: Database
) -> None:
    _, token = await credentials.create_token(db, PROJECT, "api")
    await receive(ingestor, sign(fresh("api"), token))  # the configuration is now cached
    deliveries = [sign(fresh("api"), token) for _ in range(20)]
    flushes, items = ingestor.batcher.flushes, ingestor.batcher.items

    answers = await asyncio.gather(*(receive(ingestor, d) for d in deliveries))

    assert [[o.provider_event_id for o in a] for a in answers] == [d.ids() for d in deliveries]
    assert all(o.created for a in answers for o in a)
    assert ingestor.batcher.items - items == 20
    assert ingestor.batcher.flushes - flushes < 20  # some deliveries shared a statement


async def test_producer_events_on_a_tenant_session_dedupe_and_keep_the_callers_order(
    ingestor: Ingestor, settings: Settings
) -> None:
    events = [ChannelEvent("api", f"order-{n}", {"order": n}) for n in range(3)]
    first = await ingestor.submit(submission.prepare(PROJECT, "default", events))
    mixed = [events[1], ChannelEvent("api", "order-new", {"order": 9}), events[0]]
    second = await ingestor.submit(submission.prepare(PROJECT, "default", mixed), settings)

    assert [r.provider_event_id for r in first] == ["order-0", "order-1", "order-2"]
    assert all(r.created for r in first)
    assert [(r.provider_event_id, r.created) for r in second] == [
        ("order-1", False),
        ("order-new", True),
        ("order-0", False),
    ]
    assert (second[0].run_id, second[2].run_id) == (first[1].run_id, first[0].run_id)
