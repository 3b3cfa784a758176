"""Handler versions on real Postgres and Redis (awooop.runs.versions): each attempt records the
version of the handler that ran it; a contract that requires v2 is never taken by a v1 worker,
from a stream message (acknowledged, the others rung) or by polling, and waits with blocked_on
no_worker_for_version until a v2 worker takes it; the requirement through the routes and the
CLI, with bad input refused and another project's token refused."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest

from awooop.core.config import Settings
from awooop.core.context import PLATFORM_PROJECT
from awooop.core.db import Database
from awooop.core.errors import VersionRequirementNotFoundError
from awooop.core.events import RunClaimed
from awooop.core.processes import register
from awooop.ingest import credentials
from awooop.runs import versions
from awooop.runs.blocked import Reason
from awooop.runs.blocked_facts import blocked_on
from awooop.runs.routing import ROUTE_CHANNEL, Routes, notice, routes_of
from awooop.services import Services
from awooop.streams.keys import Keys
from awooop.worker.context import RunContext
from awooop.worker.runtime import Worker
from tests.integration.test_worker_streams import announce, pending
from tests.support import handlers
from tests.support.console import log_in
from tests.support.http import app_client
from tests.support.runs import all_finished, create_runs, events_of, load
from tests.support.waiting import eventually
from tests.support.workers import cli, serving_worker, streaming_worker

P, Q = "proj-s", "proj-q"  # P: the project of test_worker_streams' helpers
V1, V2 = routes_of(None, None, "v1"), routes_of(None, None, "v2")

pytestmark = pytest.mark.fast("streams")  # polling every 60 s: only a ring makes it look sooner


def polling_worker(db: Database, settings: Settings, routes: Routes, handler: Any = None) -> Worker:
    return Worker(
        db=db,
        settings=settings,
        handler=handler or handlers.journaled,
        concurrency=4,
        routes=routes,
    )


async def claimed_versions(db: Database, run_id: uuid.UUID) -> list[str | None]:
    return [e.handler_version for e in await events_of(db, P, run_id) if isinstance(e, RunClaimed)]


async def require(db: Database, project: str, contract: str, *accepted: str) -> None:
    await db.in_tenant(
        project, lambda c: versions.require(c, project, contract, list(accepted), actor="test")
    )


async def test_each_attempt_records_the_version_of_the_handler_that_ran_it(
    db: Database, fast: Settings
) -> None:
    """Attempt 1 on a v1 worker (handed back at its shutdown), attempt 2 on a v2 worker: the
    claims record both, and ``awooop runs show`` lists each attempt with its version."""
    [run_id] = await create_runs(db, P, payload={})
    started = asyncio.Event()

    async def blocks(run: RunContext) -> None:
        started.set()
        await asyncio.Event().wait()  # until the shutdown cancels it

    old = polling_worker(db, fast, V1, blocks)
    assert await old.poll_once(0.0) == 1
    await asyncio.wait_for(started.wait(), 20)
    await old.drain(0.0)  # the lease is handed back: attempt 1 ends, uncharged
    new = polling_worker(db, fast, V2)
    assert await new.run_until_idle(max_s=20) == 1
    assert await all_finished(db, [run_id])
    assert await claimed_versions(db, run_id) == ["v1", "v2"]
    shown = cli(fast, "runs", "show", P, str(run_id), "--json")
    assert shown.returncode == 0, shown.stderr
    attempts = json.loads(shown.stdout)["attempts"]
    assert [(a["attempt"], a["worker_id"], a["handler_version"]) for a in attempts] == [
        (1, old.worker_id, "v1"),
        (2, new.worker_id, "v2"),
    ]
    table = cli(fast, "runs", "show", P, str(run_id))
    assert "HANDLER_VERSION" in table.stdout and "v2" in table.stdout
    _, manage = await credentials.create_management_token(db, P, "manage")
    async with app_client(fast, db) as http:  # the console's run page: per attempt
        await log_in(http, manage)
        page = await http.get(f"/ui/runs/{P}/{run_id}")
    assert page.status_code == 200
    shown = re.findall(r'class="mono handler-version">([^<]+)<', page.text)
    assert shown == ["v1", "v2"]


async def test_a_worker_without_a_given_version_records_its_handlers_derived_one(
    db: Database, fast: Settings
) -> None:
    [run_id] = await create_runs(db, P, payload={})
    worker = polling_worker(db, fast, Routes())
    assert worker.routes.version is not None and worker.routes.version.startswith("sha256:")
    assert await worker.run_until_idle(max_s=20) == 1
    assert await claimed_versions(db, run_id) == [worker.routes.version]


async def test_polling_leaves_a_run_to_a_worker_of_a_version_its_contract_accepts(
    db: Database, fast: Settings
) -> None:
    [two] = await create_runs(db, P, payload={}, contract="c2")
    [free] = await create_runs(db, P, payload={}, contract="c3")  # requires nothing
    await require(db, P, "c2", "v2")
    old = polling_worker(db, fast, V1)
    assert await old.run_until_idle(max_s=20) == 1  # the run of c3 only
    assert await all_finished(db, [free])
    state = await load(db, P, two)
    assert (state.status, state.attempt_count) == ("PENDING", 0)  # no attempt spent
    assert await polling_worker(db, fast, V2).run_until_idle(max_s=20) == 1
    assert await all_finished(db, [two]) and await claimed_versions(db, two) == ["v2"]
    await require(db, P, "c2", "v2", "v3")  # a list: either may take the next run
    [three] = await create_runs(db, P, payload={}, contract="c2")
    assert await polling_worker(db, fast, V1).run_until_idle(max_s=20) == 0
    assert await polling_worker(db, fast, routes_of(None, None, "v3")).run_until_idle() == 1
    assert await claimed_versions(db, three) == ["v3"]


async def test_a_delivery_a_stale_worker_may_not_take_is_acknowledged_and_rings_the_others(
    db: Database, fast: Settings, redis: Any
) -> None:
    """The v1 worker reads the message of a run whose contract requires v2: it claims
    nothing, acknowledges the message and rings the workers that serve the contract; a v2
    worker takes the run from Postgres."""
    keys = Keys(fast.redis_key_prefix, fast.shard_count)
    [two] = await create_runs(db, P, payload={}, contract="c2")
    await require(db, P, "c2", "v2")
    listener = await asyncpg.connect(fast.database_url)
    heard: asyncio.Queue[str] = asyncio.Queue()
    await listener.add_listener(ROUTE_CHANNEL, lambda *a: heard.put_nowait(str(a[3])))
    worker, intake = streaming_worker(db, fast, redis, concurrency=4, routes=V1)
    try:
        async with serving_worker(worker, intake):
            await announce(db, redis, keys, two)
            assert await asyncio.wait_for(heard.get(), 20) == notice(P, "c2", two)
            await eventually(lambda: _no_pending(redis, keys), timeout_s=20, what="acked")
    finally:
        await listener.close()
    state = await load(db, P, two)
    assert (state.status, state.attempt_count) == ("PENDING", 0)
    assert await claimed_versions(db, two) == []
    assert await polling_worker(db, fast, V2).run_until_idle(max_s=20) == 1
    assert await all_finished(db, [two]) and await claimed_versions(db, two) == ["v2"]


async def _no_pending(redis: Any, keys: Keys) -> bool:
    return not await pending(redis, keys)


async def test_blocked_on_names_the_accepted_versions_and_those_the_live_workers_run(
    services: Services,
) -> None:
    db = services.db
    [two] = await create_runs(db, P, contract="c2")
    [free] = await create_runs(db, P, contract="c3")
    await require(db, P, "c2", "v2", "v3")

    async def reasons() -> dict[uuid.UUID, Any]:
        return await db.in_tenant(
            P, lambda c: blocked_on(c, services.redis, services.keys, [two, free], 30.0)
        )

    async with db.platform_writes() as conn:
        await register(conn, "w-v1", "worker", "test", 30.0, (None, None, "v1"))
        await register(conn, "w-v0", "worker", "test", 30.0, (["c3"], None, "v0"))  # not c2's
    got = await reasons()
    assert got[free].reason is Reason.PENDING_WORKERS_BUSY
    assert got[two].reason is Reason.NO_WORKER_FOR_VERSION
    assert "accepts handler version(s) v2, v3" in got[two].summary
    assert "the live workers that serve it run v1" in got[two].summary
    assert "--handler-version v3 --contract c2" in got[two].next_action
    async with db.platform_writes() as conn:
        await register(conn, "w-v3", "worker", "test", 30.0, (["c2"], [P], "v3"))
    assert (await reasons())[two].reason is Reason.PENDING_WORKERS_BUSY
    await db.in_tenant(P, lambda c: versions.clear(c, P, "c2", actor="test"))
    async with db.platform_writes() as conn:
        await conn.execute("DELETE FROM awooop_processes WHERE instance = 'w-v3'")
    assert (await reasons())[two].reason is Reason.PENDING_WORKERS_BUSY  # nothing required


@pytest.fixture
async def client(settings: Settings, db: Database) -> AsyncIterator[httpx.AsyncClient]:
    async with app_client(settings, db) as http:
        yield http


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def stored(db: Database, project: str) -> list[tuple[str, tuple[str, ...]]]:
    found = await db.in_platform(lambda c: versions.listing(c, project))
    return [(r.contract_id, r.versions) for r in found]


async def test_the_routes_set_list_and_clear_a_projects_own_requirement(
    client: httpx.AsyncClient, db: Database
) -> None:
    manage_id, manage = await credentials.create_management_token(db, P, "manage")
    _, reader = await credentials.create_management_token(db, P, "read")
    _, other = await credentials.create_management_token(db, Q, "manage")
    _, admin = await credentials.create_management_token(db, PLATFORM_PROJECT, "admin")
    path = f"/v1/projects/{P}/versions/triage"

    for bad in (["v 2"], [""], ["x" * 65], [], [f"v{i}" for i in range(17)], [3], ["-v"]):
        refused = await client.put(path, json={"versions": bad}, headers=bearer(manage))
        assert (refused.status_code, refused.json()["code"]) == (400, "E-VERSION-001"), bad
    refused = await client.put(path, json={"versions": "v2"}, headers=bearer(manage))
    assert refused.status_code == 400  # not a list
    foreign = await client.put(path, json={"versions": ["v9"]}, headers=bearer(other))
    assert (foreign.status_code, foreign.json()["code"]) == (403, "E-AUTH-002")
    looked = await client.get(f"/v1/projects/{P}/versions", headers=bearer(other))
    assert (looked.status_code, looked.json()["code"]) == (403, "E-AUTH-002")
    read_only = await client.put(path, json={"versions": ["v2"]}, headers=bearer(reader))
    assert (read_only.status_code, read_only.json()["code"]) == (403, "E-AUTH-004")
    assert await stored(db, P) == []  # nothing written by any refusal

    done = await client.put(path, json={"versions": ["v1", "v2", "v1"]}, headers=bearer(manage))
    assert done.status_code == 200, done.text
    assert (done.json()["versions"], done.json()["set_by"]) == (
        ["v1", "v2"],
        f"manage-token:{manage_id}",
    )
    again = await client.put(path, json={"versions": ["v2"], "actor": "Ana"}, headers=bearer(admin))
    assert (again.json()["versions"], again.json()["set_by"]) == (["v2"], "Ana")
    listed = await client.get(f"/v1/projects/{P}/versions", headers=bearer(reader))
    assert [(r["contract_id"], r["versions"]) for r in listed.json()] == [("triage", ["v2"])]
    assert await stored(db, Q) == []

    dropped = await client.delete(path, headers=bearer(other))
    assert (dropped.status_code, dropped.json()["code"]) == (403, "E-AUTH-002")
    dropped = await client.delete(path, headers=bearer(manage))
    assert dropped.status_code == 200 and dropped.json()["versions"] == ["v2"]
    gone = await client.delete(path, headers=bearer(manage))
    assert (gone.status_code, gone.json()["code"]) == (404, "E-VERSION-002")


async def test_a_tenant_transaction_cannot_write_another_projects_requirement(
    db: Database,
) -> None:
    async with db.tenant(Q) as conn:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):  # row-level security
            async with conn.transaction():
                await versions.require(conn, P, "triage", ["v9"], actor="q")
    await require(db, P, "triage", "v2")
    assert await db.in_tenant(Q, lambda c: versions.listing(c, None)) == []
    async with db.tenant(Q) as conn:  # nor drop it
        with pytest.raises(VersionRequirementNotFoundError):
            await versions.clear(conn, P, "triage", actor="q")
    assert await stored(db, P) == [("triage", ("v2",))]


async def test_the_cli_sets_lists_and_clears_and_refuses_a_bad_version(
    db: Database, settings: Settings
) -> None:
    bad = cli(settings, "projects", "require-version", P, "triage", "v2", "no spaces")
    assert bad.returncode == 1 and "error E-VERSION-001" in bad.stderr, bad.stderr
    assert await stored(db, P) == []
    made = cli(settings, "projects", "require-version", P, "triage", "v1", "v2", "--json")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["versions"] == ["v1", "v2"]
    listed = cli(settings, "projects", "required-versions", "--project", P)
    assert "triage" in listed.stdout and "v1, v2" in listed.stdout
    assert cli(settings, "projects", "clear-version", P, "triage").returncode == 0
    again = cli(settings, "projects", "clear-version", P, "triage")
    assert again.returncode == 1 and "error E-VERSION-002" in again.stderr
    assert await stored(db, P) == []
