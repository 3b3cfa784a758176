"""``/healthz``, ``/readyz`` and ``/metrics`` of the HTTP server.

- ``/healthz`` is liveness only: the process answers (200), whatever its stores do.
- ``/readyz`` is readiness **for ingest**: 200 while Postgres answers with a schema this
  release runs on (every migration of the release applied as a released version,
  awooop/core/schema_check.py), because Postgres is the truth and ingest commits there alone
  (the relay publishes to Redis later). Redis not answering leaves the process ready but
  ``degraded``: the body says ``"status": "degraded"`` with the check's error, and
  ``awooop_readiness_degraded{dependency="redis"}`` is 1 (0 once Redis answers again), so a
  load balancer keeps a working ingest in service while alerts and dashboards still see the
  outage. Postgres not answering, or a schema the release cannot run on (the ``schema`` check
  says why, with ``E-MIGRATE-003``), is 503 ``E-HTTP-503``.
- ``/metrics``: the process's Prometheus registry.
"""

from __future__ import annotations

import asyncio

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from awooop.core.errors import AwoooPError, SchemaMismatchError, http_error_code
from awooop.core.metrics import READINESS_DEGRADED
from awooop.core.schema_check import read_schema_state
from awooop.services import Services

CHECK_TIMEOUT_S = 2.0
# What each dependency's failure means for ingest: Postgres and its schema required, Redis
# optional.
REQUIRED, OPTIONAL = ("postgres", "schema"), ("redis",)


def readiness(checks: dict[str, str]) -> tuple[int, dict[str, object]]:
    """Pure: the status code and body of ``/readyz`` from each dependency's check result
    (``"ok"`` or ``"error: ..."``)."""
    if any(checks[name] != "ok" for name in REQUIRED):
        return 503, {"status": "unavailable", "checks": checks, "code": http_error_code(503)}
    degraded = [name for name in OPTIONAL if checks[name] != "ok"]
    if degraded:
        return 200, {"status": "degraded", "degraded": degraded, "checks": checks}
    return 200, {"status": "ok", "checks": checks}


def routes(services: Services) -> list[BaseRoute]:
    for name in OPTIONAL:  # the series exists from the first scrape
        READINESS_DEGRADED.labels(name)

    async def healthz(_request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(_request: Request) -> Response:
        checks: dict[str, str] = {}

        async def postgres() -> None:
            async with services.db.platform() as conn:
                await conn.fetchval("SELECT 1")

        async def schema() -> None:
            async with services.db.platform() as conn:
                state = await read_schema_state(conn)
            if not state.runnable:
                raise SchemaMismatchError(state.problem())

        async def redis() -> None:
            await services.redis.ping()

        for name, check in (("postgres", postgres), ("schema", schema), ("redis", redis)):
            try:
                await asyncio.wait_for(check(), timeout=CHECK_TIMEOUT_S)
                checks[name] = "ok"
            except AwoooPError as exc:
                checks[name] = f"error: {exc.code}: {exc.message}"
            except Exception as exc:
                checks[name] = f"error: {type(exc).__name__}"
        for name in OPTIONAL:
            READINESS_DEGRADED.labels(name).set(0 if checks[name] == "ok" else 1)
        status, body = readiness(checks)
        return JSONResponse(body, status_code=status)

    async def metrics(_request: Request) -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
    ]
