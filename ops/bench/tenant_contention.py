"""The contention phase of ops/bench/tenant_reads.py: tenant A's slow requests next to tenant B.

For ``seconds``, 20 clients of tenant A (a ``read`` console session) ask for the run list
without pause, and every one of A's list statements is slow: the phase holds an ACCESS
EXCLUSIVE lock on ``awooop_approvals``, which the list's blocked-on facts read, so each of A's
requests that gets past the share waits in Postgres until the statement timeout. Meanwhile
tenant B (a ``manage`` token of another project) asks for one of its runs
(``GET /v1/projects/B/runs/{id}``, which does not read that table) every 0.2 s. Reports what A
was answered (429 beyond its share, 503 E-DB-003 at the statement bound) and B's latencies,
against the 300 ms target for B's median.
"""

from __future__ import annotations

import asyncio
import collections
import statistics
import time
import uuid
from typing import Any

import asyncpg
import httpx

TARGET_MS = 300.0
CLIENTS = 20


async def contention(
    url: str,
    base: str,
    login: Any,
    a_token: str,
    b_project: str,
    b_token: str,
    b_run: uuid.UUID,
    seconds: float,
) -> dict[str, Any]:
    """Run the phase (see the module docstring); ``login(http, token)`` logs a client in."""
    a_answers: collections.Counter[str] = collections.Counter()
    b_samples: list[float] = []
    b_statuses: collections.Counter[int] = collections.Counter()
    stop = asyncio.Event()
    limits = httpx.Limits(max_connections=CLIENTS + 5, max_keepalive_connections=CLIENTS + 5)

    async def tenant_a(http: httpx.AsyncClient) -> None:
        while not stop.is_set():
            answer = await http.get("/ui/runs")
            code = "E-HTTP-429" if answer.status_code == 429 else ""
            if answer.status_code == 503:
                code = "E-DB-003" if "E-DB-003" in answer.text else "503"
            a_answers[f"{answer.status_code} {code}".strip()] += 1

    async def tenant_b(http: httpx.AsyncClient) -> None:
        path = f"/v1/projects/{b_project}/runs/{b_run}"
        while not stop.is_set():
            started = time.perf_counter()
            answer = await http.get(path)
            b_samples.append((time.perf_counter() - started) * 1000)
            b_statuses[answer.status_code] += 1
            await asyncio.sleep(0.2)

    locker = await asyncpg.connect(url)
    try:
        async with (
            httpx.AsyncClient(base_url=base, timeout=120, limits=limits) as a,
            httpx.AsyncClient(
                base_url=base, timeout=120, headers={"authorization": f"Bearer {b_token}"}
            ) as b,
        ):
            await login(a, a_token)
            async with locker.transaction():
                await locker.execute("LOCK TABLE awooop_approvals IN ACCESS EXCLUSIVE MODE")
                tasks = [asyncio.create_task(tenant_a(a)) for _ in range(CLIENTS)]
                tasks.append(asyncio.create_task(tenant_b(b)))
                await asyncio.sleep(seconds)
                stop.set()
            await asyncio.gather(*tasks)
    finally:
        await locker.close()
    ordered = sorted(b_samples)
    median = statistics.median(b_samples)
    return {
        "seconds": seconds,
        "tenant_a_clients": CLIENTS,
        "tenant_a_answers": dict(a_answers),
        "tenant_b_requests": len(b_samples),
        "tenant_b_statuses": {str(k): v for k, v in b_statuses.items()},
        "tenant_b_median_ms": round(median, 1),
        "tenant_b_p95_ms": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 1),
        "tenant_b_max_ms": round(ordered[-1], 1),
        "target_ms": TARGET_MS,
        "met": median < TARGET_MS and set(b_statuses) == {200},
    }
