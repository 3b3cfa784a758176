"""The fault-injection proxy does what the fault tests rely on, against the real servers."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest
import redis.asyncio as aioredis
import redis.exceptions

from tests.support.faultproxy import fault_proxy


async def test_postgres_through_the_proxy_black_hole_holds_then_heal_delivers(
    database_url: str,
) -> None:
    with fault_proxy(database_url) as proxy:
        conn = await asyncpg.connect(proxy.url(database_url))
        try:
            assert await conn.fetchval("SELECT 1") == 1
            proxy.blackhole()
            pending = asyncio.ensure_future(conn.fetchval("SELECT 2"))
            done, _ = await asyncio.wait({pending}, timeout=1.0)
            assert not done, "a black-holed connection must not answer"
            proxy.heal()
            assert await asyncio.wait_for(pending, timeout=10) == 2
        finally:
            await conn.close()


async def test_latency_delays_every_round_trip(database_url: str) -> None:
    with fault_proxy(database_url) as proxy:
        conn = await asyncpg.connect(proxy.url(database_url))
        try:
            proxy.latency(0.3)
            started = time.monotonic()
            assert await conn.fetchval("SELECT 3") == 3
            # One round trip: the query and its answer are each delayed 0.3 s.
            assert time.monotonic() - started >= 0.55
        finally:
            await conn.close()


async def test_reset_breaks_open_connections_and_refuse_breaks_new_ones(
    database_url: str, redis_server_url: str
) -> None:
    with fault_proxy(redis_server_url) as proxy:
        client = aioredis.Redis.from_url(proxy.url(redis_server_url), retry_on_error=[])
        try:
            assert await client.ping()
            proxy.refuse(True)
            proxy.reset()
            with pytest.raises((redis.exceptions.ConnectionError, ConnectionError)):
                await client.ping()
            proxy.refuse(False)
            assert await client.ping()
        finally:
            await client.aclose()
    with fault_proxy(database_url) as proxy:
        conn = await asyncpg.connect(proxy.url(database_url))
        proxy.reset()
        with pytest.raises((ConnectionError, OSError, asyncpg.ConnectionDoesNotExistError)):
            await conn.fetchval("SELECT 1")
        conn.terminate()


async def test_bandwidth_throttles_a_large_answer(redis_server_url: str, redis_prefix: str) -> None:
    with fault_proxy(redis_server_url) as proxy:
        client = aioredis.Redis.from_url(proxy.url(redis_server_url))
        try:
            key = f"{redis_prefix}:big"
            await client.set(key, b"x" * 200_000)
            proxy.bandwidth(400_000)
            started = time.monotonic()
            assert len(await client.get(key)) == 200_000
            assert time.monotonic() - started >= 0.4
            await client.delete(key)
        finally:
            await client.aclose()
