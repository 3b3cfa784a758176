"""A tenant's management and console requests cost bounded, cancellable work within a share
(:mod:`awooop.http.capacity`), on the real server (uvicorn, as ``awooop serve`` runs it) over
real Postgres and Redis.

A statement is made slow deterministically: the test holds an ACCESS EXCLUSIVE lock on a table
the request reads, so the request's statement waits on the lock in Postgres (``pg_stat_activity``
shows it active) for as long as the test wants, whatever the machine's load.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import httpx
import msgspec
import pytest

from awooop.commands.serve import listen_socket
from awooop.core.config import Settings
from awooop.core.context import PLATFORM_PROJECT
from awooop.http.app import create_app
from awooop.http.console_session import COOKIE
from awooop.http.server import StoppingServer, server_config
from awooop.ingest import credentials
from awooop.services import Services
from tests.support.console import log_in
from tests.support.runs import create_runs
from tests.support.waiting import eventually

A, B = "proj-cap-a", "proj-cap-b"
SHARE = 3


@asynccontextmanager
async def serving(settings: Settings, **overrides: Any) -> AsyncIterator[tuple[Services, str]]:
    """The server ``awooop serve`` runs (pool of 10 per role), with settings ``overrides``."""
    changed = msgspec.structs.replace(settings, **overrides)
    services = await Services.open(changed, db_pool_size=10)
    server = StoppingServer(server_config(create_app(services), changed), services.stopping)
    sock = listen_socket("127.0.0.1", 0, reuse_port=False)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:

        def started() -> bool:
            assert not task.done(), "the server exited"
            return bool(server.started)

        await eventually(started, interval_s=0.02, what="the server started")
        yield services, f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 30)
        sock.close()
        await services.close()


@asynccontextmanager
async def table_locked(database_url: str, table: str) -> AsyncIterator[None]:
    """``table`` locked ACCESS EXCLUSIVE by another session until the block ends."""
    conn = await asyncpg.connect(database_url)
    try:
        async with conn.transaction():
            await conn.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
            yield
    finally:
        await conn.close()


async def waiting_on_lock(database_url: str, fragment: str) -> list[int]:
    """The pids of this database's backends whose statement contains ``fragment`` and that are
    still running it (active), other than the one asking."""
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND state = 'active' AND pid <> pg_backend_pid() AND position($1 in query) > 0",
            fragment,
        )
    finally:
        await conn.close()
    return [r["pid"] for r in rows]


async def console_session(base: str, token: str) -> httpx.Cookies:
    """Log in to the console with ``token``; the session's cookies."""
    async with httpx.AsyncClient(base_url=base) as http:
        await log_in(http, token)
        return http.cookies


RUN_READ = "FROM awooop_run_state WHERE run_id = $1"  # store.load: GET run
# The blocked-on facts (the console's run list), which read awooop_approvals: by their first
# line, since pg_stat_activity keeps only a statement's first track_activity_query_size bytes.
FACTS_READ = "SELECT rs.run_id, rs.project_id, rs.status, rs.attempt_count, rs.max_attempts"


@pytest.mark.parametrize(
    ("scope", "route", "table", "fragment"),
    [
        ("read", "bearer GET run", "awooop_run_state", RUN_READ),
        ("read", "console list", "awooop_approvals", FACTS_READ),  # tenant role
        ("admin", "console list", "awooop_approvals", FACTS_READ),  # platform role
    ],
)
async def test_a_client_that_leaves_mid_query_frees_its_backend_within_a_second(
    settings: Settings, scope: str, route: str, table: str, fragment: str
) -> None:
    async with serving(settings) as (services, base):
        [run_id] = await create_runs(services.db, A)
        owner = PLATFORM_PROJECT if scope == "admin" else A
        _, token = await credentials.create_management_token(services.db, owner, scope)
        if route == "bearer GET run":
            path, credential = f"/v1/projects/{A}/runs/{run_id}", f"Authorization: Bearer {token}"
        else:
            cookies = await console_session(base, token)
            path, credential = "/ui/runs", f"Cookie: {COOKIE}={cookies[COOKIE]}"
        request = f"GET {path} HTTP/1.1\r\nHost: a\r\n{credential}\r\n\r\n".encode()
        async with table_locked(settings.database_url, table):
            _, writer = await asyncio.open_connection("127.0.0.1", int(base.rsplit(":", 1)[1]))
            writer.write(request)
            await writer.drain()
            [pid] = await eventually(
                lambda: waiting_on_lock(settings.database_url, fragment),
                what="the request's statement waiting on the lock",
            )
            writer.close()
            left = time.monotonic()
            await eventually(
                lambda: waiting_on_lock(settings.database_url, fragment),
                equals=[],
                timeout_s=5,
                interval_s=0.02,
                what="the backend of the departed request idle",
            )
            freed_s = time.monotonic() - left
            # The lock is still held: only the cancellation can have ended the statement.
            conn = await asyncpg.connect(settings.database_url)
            try:
                state = await conn.fetchval(
                    "SELECT state FROM pg_stat_activity WHERE pid = $1", pid
                )
            finally:
                await conn.close()
        assert freed_s < 1.0, f"the backend stayed busy {freed_s:.2f} s after the client left"
        assert state in (None, "idle"), state  # back in the pool (or closed), not running
        # The pool is whole and the share given back: the same request is served in full.
        async with httpx.AsyncClient(base_url=base) as http:
            answer = await http.get(path, headers=dict([credential.split(": ", 1)]))
        assert answer.status_code == 200, answer.text


async def test_a_statement_over_the_timeout_is_503_with_a_code_and_leaves_nothing_running(
    settings: Settings,
) -> None:
    async with serving(settings, http_statement_timeout_s=1.0) as (services, base):
        [run_id] = await create_runs(services.db, A)
        _, token = await credentials.create_management_token(services.db, A, "manage")
        async with (
            table_locked(settings.database_url, "awooop_run_state"),
            httpx.AsyncClient(base_url=base, timeout=30) as http,
        ):
            answer = await http.get(
                f"/v1/projects/{A}/runs/{run_id}", headers={"authorization": f"Bearer {token}"}
            )
            assert await waiting_on_lock(settings.database_url, RUN_READ) == []
    assert answer.status_code == 503, answer.text
    assert answer.json()["code"] == "E-DB-003"
    assert int(answer.headers["retry-after"]) >= 1


@pytest.mark.connections(20)
async def test_a_tenants_slow_requests_leave_another_tenants_management_api_answering(
    settings: Settings,
) -> None:
    """Tenant A sends 20 console list requests whose statements are stuck; A holds at most
    its share of requests (the rest: 429 with Retry-After, on the console and the bearer
    routes alike), and tenant B's management GETs and ingest answer meanwhile."""
    async with serving(settings, http_tenant_requests=SHARE, http_statement_timeout_s=120.0) as (
        services,
        base,
    ):
        await create_runs(services.db, A, 2)
        [b_run] = await create_runs(services.db, B)
        _, a_read = await credentials.create_management_token(services.db, A, "read")
        _, b_manage = await credentials.create_management_token(services.db, B, "manage")
        _, b_ingest = await credentials.create_token(services.db, B, "api")
        cookies = await console_session(base, a_read)
        limits = httpx.Limits(max_connections=40, max_keepalive_connections=0)
        async with (
            httpx.AsyncClient(base_url=base, cookies=cookies, timeout=120, limits=limits) as a,
            httpx.AsyncClient(
                base_url=base, headers={"authorization": f"Bearer {b_manage}"}, timeout=60
            ) as b,
        ):
            async with table_locked(settings.database_url, "awooop_approvals"):
                pages = [asyncio.create_task(a.get("/ui/runs")) for _ in range(20)]
                await eventually(
                    lambda: sum(p.done() for p in pages) == 20 - SHARE,
                    what="every request of A beyond its share answered",
                )
                stuck = await eventually(
                    lambda: waiting_on_lock(settings.database_url, FACTS_READ),
                    what="A's requests waiting on the lock",
                )
                refused = [p.result() for p in pages if p.done()]
                # A bearer request of A is over the share too (the same project's budget).
                over = await a.get(
                    f"/v1/projects/{A}/runs/{uuid.uuid4()}",
                    headers={"authorization": f"Bearer {a_read}"},
                )
                # B's management API answers while A's requests hold their share.
                started = time.monotonic()
                b_run_page = await asyncio.wait_for(b.get(f"/v1/projects/{B}/runs/{b_run}"), 30)
                b_contracts = await asyncio.wait_for(b.get(f"/v1/projects/{B}/contracts"), 30)
                b_cancel = await asyncio.wait_for(
                    b.post(f"/v1/projects/{B}/runs/{b_run}/cancel", json={"reason": "cap"}), 30
                )
                b_elapsed = time.monotonic() - started
                # And B's ingest (a pool of its own, no share) takes a delivery meanwhile.
                delivered = await asyncio.wait_for(
                    b.post(
                        f"/v1/projects/{B}/channels/api?contract_id=default",
                        json={"order": 42},
                        headers={
                            "authorization": f"Bearer {b_ingest}",
                            "idempotency-key": "cap-1",
                        },
                    ),
                    30,
                )
                still_held = sum(not p.done() for p in pages)
            held = await asyncio.wait_for(asyncio.gather(*pages), 60)
        # A's share is whole again once its requests ended.
        async with httpx.AsyncClient(base_url=base, cookies=cookies) as again:
            after = await again.get("/ui/runs")
    assert len(stuck) == SHARE, stuck
    assert still_held == SHARE
    assert [r.status_code for r in refused] == [429] * (20 - SHARE)
    for page in refused:
        assert int(page.headers["retry-after"]) >= 1
        assert "E-HTTP-429" in page.text
    assert over.status_code == 429 and over.json()["code"] == "E-HTTP-429", over.text
    assert int(over.headers["retry-after"]) >= 1
    assert b_run_page.status_code == 200, b_run_page.text
    assert b_contracts.status_code == 200, b_contracts.text
    assert b_cancel.status_code == 200 and b_cancel.json()["status"] == "CANCELLED", b_cancel.text
    assert b_elapsed < 30  # well within the 120 s statement timeout A's statements wait out
    assert delivered.status_code == 202, delivered.text
    # Once the lock is gone A's held requests are served in full.
    assert sorted(r.status_code for r in held) == [200] * SHARE + [429] * (20 - SHARE)
    assert after.status_code == 200
