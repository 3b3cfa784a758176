"""``/healthz`` (the process answers), ``/readyz`` (Postgres and Redis answer), ``/metrics``."""

from __future__ import annotations

import asyncio

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from awooop.services import Services


def routes(services: Services) -> list[BaseRoute]:
    async def healthz(_request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(_request: Request) -> Response:
        checks: dict[str, str] = {}

        async def postgres() -> None:
            async with services.db.platform() as conn:
                await conn.fetchval("SELECT 1")

        async def redis() -> None:
            await services.redis.ping()

        for name, check in (("postgres", postgres), ("redis", redis)):
            try:
                await asyncio.wait_for(check(), timeout=2.0)
                checks[name] = "ok"
            except Exception as exc:
                checks[name] = f"error: {type(exc).__name__}"
        ready = all(v == "ok" for v in checks.values())
        body = {"status": "ok" if ready else "unavailable", "checks": checks}
        if not ready:
            body["code"] = "E-HTTP-503"
        return JSONResponse(body, status_code=200 if ready else 503)

    async def metrics(_request: Request) -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
    ]
