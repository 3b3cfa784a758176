"""``/readyz`` is readiness for ingest: with Redis stopped ingest goes on (202) and ``/readyz``
answers 200 ``degraded`` (body and metric), and ``ok`` again once Redis is back; Postgres not
answering makes it 503. ``/healthz`` is liveness only."""

from __future__ import annotations

import msgspec
from prometheus_client import REGISTRY

from awooop.core.config import Settings
from awooop.http.health import readiness
from tests.support.ingest import ingest_app
from tests.support.services import private_redis
from tests.support.webhooks import fresh


def degraded_gauge() -> float | None:
    return REGISTRY.get_sample_value("awooop_readiness_degraded", {"dependency": "redis"})


async def test_with_redis_stopped_readyz_is_200_degraded_while_ingest_accepts(
    settings: Settings,
) -> None:
    with private_redis() as server:
        private = msgspec.structs.replace(
            settings, redis_url=server.url, redis_socket_timeout_s=2.0
        )
        async with ingest_app(private) as ingest:
            ready = await ingest.client.get("/readyz")
            assert ready.status_code == 200 and ready.json()["status"] == "ok", ready.text
            assert degraded_gauge() == 0

            server.stop()
            accepted = await ingest.post(fresh("api"))
            assert accepted.status_code == 202, accepted.text
            ready = await ingest.client.get("/readyz")
            assert ready.status_code == 200, ready.text
            body = ready.json()
            assert body["status"] == "degraded" and body["degraded"] == ["redis"], body
            assert body["checks"]["postgres"] == "ok"
            assert body["checks"]["redis"].startswith("error: "), body
            assert degraded_gauge() == 1
            assert (await ingest.client.get("/healthz")).status_code == 200

            server.start()  # the same port: Redis is back
            ready = await ingest.client.get("/readyz")
            assert ready.status_code == 200 and ready.json()["status"] == "ok", ready.text
            assert degraded_gauge() == 0


def test_postgres_down_is_not_ready_and_redis_down_is_degraded() -> None:
    ok = {"postgres": "ok", "schema": "ok", "redis": "ok"}
    assert readiness(ok) == (200, {"status": "ok", "checks": ok})
    status, body = readiness({**ok, "postgres": "error: OSError"})
    assert status == 503 and body["status"] == "unavailable" and body["code"] == "E-HTTP-503"
    status, body = readiness({**ok, "postgres": "error: OSError", "redis": "error: Timeout"})
    assert status == 503
    status, body = readiness({**ok, "schema": "error: E-MIGRATE-003: not applied: 0120_x.sql"})
    assert status == 503 and body["status"] == "unavailable"
    status, body = readiness({**ok, "redis": "error: ConnectionError"})
    assert status == 200 and body["status"] == "degraded"
