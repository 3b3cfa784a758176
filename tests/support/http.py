"""An in-process HTTP client of the ASGI app on real Postgres and Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.http.app import create_app
from awooop.services import Services, redis_client
from awooop.streams.keys import Keys
from tests.support.waiting import eventually


@asynccontextmanager
async def app_client(
    settings: Settings, db: Database, bearer: str | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    """The app on ``db`` and the settings' Redis; ``bearer`` is sent on every request."""
    services = Services(
        settings=settings,
        db=db,
        redis=redis_client(settings.redis_url),
        keys=Keys(settings.redis_key_prefix, settings.shard_count),
    )
    headers = {"authorization": f"Bearer {bearer}"} if bearer else None
    transport = httpx.ASGITransport(app=create_app(services))
    try:
        async with httpx.AsyncClient(
            transport=transport, base_url="http://test", headers=headers
        ) as http:
            yield http
    finally:
        for close in reversed(services.closers):  # what the routes opened (the output bell)
            await close()
        await services.redis.aclose()


async def wait_ready(http: httpx.AsyncClient) -> None:
    """Until the server behind ``http`` answers ``/readyz`` with 200 (up to 60 s)."""

    async def readyz() -> int:
        return (await http.get("/readyz")).status_code

    await eventually(
        readyz,
        equals=200,
        ignoring=(httpx.HTTPError,),
        timeout_s=60,
        interval_s=0.2,
        what="the server answers /readyz",
    )
