"""Ingest test helpers: the ASGI app on real services, project credentials, row counts."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.telemetry import configure_tracing
from awooop.http.app import create_app
from awooop.ingest import credentials
from awooop.services import Services
from tests.support.webhooks import (
    BEARER_CHANNELS,
    OTHER_PROJECT,
    PROJECT,
    SECRETS,
    Delivery,
    sign,
)

# What each table holds per delivery: a dedupe KEY (a key claims a row in two windows:
# migrations/0112_partitioned_dedupe.sql), a run, a stream, an event.
COUNTED = {
    "awooop_channel_event_dedupe": "SELECT count(DISTINCT (project_id, channel_type, "
    "provider_event_id)) FROM awooop_channel_event_dedupe",
    "awooop_run_state": "SELECT count(*) FROM awooop_run_state",
    "awooop_event_streams": "SELECT count(*) FROM awooop_event_streams",
    "awooop_events": "SELECT count(*) FROM awooop_events",
}


@dataclass
class Ingest:
    services: Services
    client: httpx.AsyncClient
    creds: dict[str, str]  # channel -> secret or bearer token of PROJECT
    other_creds: dict[str, str]  # the same for OTHER_PROJECT

    @property
    def db(self) -> Database:
        return self.services.db

    async def post(self, delivery: Delivery, signed: bool = True) -> httpx.Response:
        if signed:
            sign(delivery, self.creds[delivery.channel])
        # Header values as bytes: HTTP allows latin-1 octets, httpx would insist on ASCII.
        headers = {k: v.encode("latin-1") for k, v in delivery.headers.items()}
        return await self.client.post(delivery.path, content=delivery.body, headers=headers)


async def provision(db: Database, project: str) -> dict[str, str]:
    creds: dict[str, str] = {}
    for channel, secret in SECRETS.items():
        creds[channel] = f"{secret}-{project}"  # each project its own
        await credentials.set_secret(db, project, channel, creds[channel])
    for channel in BEARER_CHANNELS:
        _, creds[channel] = await credentials.create_token(db, project, channel)
    return creds


async def counts(db: Database) -> dict[str, int]:
    async with db.platform() as conn:
        return {t: await conn.fetchval(query) for t, query in COUNTED.items()}


@asynccontextmanager
async def ingest_app(settings: Settings) -> AsyncIterator[Ingest]:
    """The app on real services with two provisioned projects, behind an ASGI client."""
    configure_tracing("awooop-test")  # what `awooop serve` does: spans get real trace ids
    services = await Services.open(settings, db_pool_size=4)
    app = create_app(services)
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://awooop.test") as client:
            yield Ingest(
                services,
                client,
                await provision(services.db, PROJECT),
                await provision(services.db, OTHER_PROJECT),
            )
    finally:
        await services.close()


@pytest.fixture
async def ingest(settings: Settings) -> AsyncIterator[Ingest]:
    async with ingest_app(settings) as opened:
        yield opened
