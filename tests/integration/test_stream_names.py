"""Stream names belong to their project (R-44, migrations/0115_stream_names.sql).

A producer login bound to ``alpha`` tries every kind of stream name of ``beta`` (a revision
stream, a domain stream, a run stream), each once with a name beta already uses and once with a
name beta does not use yet: through the producer library and the event log's functions, and by
hand in SQL on its own login. Every attempt is refused with a code and writes nothing, the
refusal is the same whether beta uses the name or not (nothing tells alpha that a name exists),
and beta's revisions, emits and submits go on working on exactly those names.
"""

from __future__ import annotations

import re
import shutil
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from awooop import producer
from awooop.core.db import Database
from awooop.core.errors import AwoooPError
from awooop.core.events import ApprovalGranted, revision_stream_id, run_stream_id
from awooop.core.migrate import MIGRATIONS_DIR, migrate
from awooop.eventlog import eventlog
from awooop.eventlog.eventlog import RawEvent
from awooop.producer import ChannelEvent, DomainEvent
from awooop.revisions.service import Revisions
from tests.support import databases, tenant_rows
from tests.support.ingest import counts
from tests.support.logins import Login, bound_login
from tests.unit.test_stream_names import CASES

ALPHA, BETA = "alpha", "beta"
FAMILY, BODY = "policy_routing", {"model": "qwen"}
USED_CONTRACT, FREE_CONTRACT = "default", "fresh"
USED_DOMAIN, FREE_DOMAIN = "order-used", "order-42"

# How the database refuses a row: a row-level security policy, or the stream-name CHECK.
POLICY, CHECK = "42501:", "23514:"
REFUSED = (POLICY, CHECK)
HEAD = (
    "INSERT INTO awooop_event_streams (stream_id, project_id, version, last_tx_id) "
    "VALUES ($1, $2, 1, pg_current_xact_id())"
)
RAW_WRITES = {
    "head": HEAD,
    "head_if_free": HEAD + " ON CONFLICT (stream_id) DO NOTHING",
    "event": (
        "INSERT INTO awooop_events (event_id, stream_id, version, project_id, event_type, data) "
        "VALUES (gen_random_uuid(), $1, 1, $2, $3, '{}')"
    ),
}
# Alpha's own domain head renamed to another project's name.
RENAME_HEAD = "UPDATE awooop_event_streams SET stream_id = $1 WHERE stream_id = $2"
# What alpha may try to learn or change about an existing head: nothing is visible.
RAW_READS = {
    "read_head": "SELECT count(*) FROM awooop_event_streams WHERE stream_id = $1",
    "read_events": "SELECT count(*) FROM awooop_events WHERE stream_id = $1",
    "move_head": (
        "WITH moved AS (UPDATE awooop_event_streams SET project_id = $2, version = version + 1 "
        "WHERE stream_id = $1 RETURNING 1) SELECT count(*) FROM moved"
    ),
}


@pytest.fixture
async def alpha_login(database_url: str, db: Database) -> AsyncIterator[Login]:
    for project in (ALPHA, BETA):
        await tenant_rows.seed_project(db, project)
    async with bound_login(database_url, [ALPHA]) as login:
        yield login


async def beta_uses_names(db: Database) -> dict[str, tuple[str, str]]:
    """Per kind of stream, (a name beta uses, a name of beta's that nobody uses yet)."""
    await Revisions(db).create(BETA, FAMILY, USED_CONTRACT, BODY)
    await producer.emit(db, BETA, DomainEvent(USED_DOMAIN, "OrderPaid", {"n": 1}))
    run = await producer.submit(db, BETA, ChannelEvent("api", "beta-order-1", {}))
    return {
        "revision": (
            revision_stream_id(BETA, FAMILY, USED_CONTRACT),
            revision_stream_id(BETA, FAMILY, FREE_CONTRACT),
        ),
        "domain": (
            producer.domain_stream_id(BETA, USED_DOMAIN),
            producer.domain_stream_id(BETA, FREE_DOMAIN),
        ),
        "run": (run_stream_id(run.run_id), run_stream_id(uuid.uuid4())),
    }


def outcome(exc: BaseException | None, name: str) -> str:
    """What the caller is told, with the name itself taken out (it differs by design)."""
    if exc is None:
        return "written"
    if isinstance(exc, AwoooPError):
        told = f"{exc.code}: {exc.message}"
    elif isinstance(exc, asyncpg.PostgresError):
        told = f"{exc.sqlstate}: {exc.message}"
    else:
        raise exc
    return re.sub(
        r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<id>", told
    ).replace(name, "<name>")


async def try_in_transaction(
    conn: Any, name: str, attempt: Callable[[], Awaitable[Any]]
) -> tuple[str, bool]:
    """The outcome of ``attempt`` in alpha's tenant transaction, rolled back in any case
    ("written", "answered <value>" or the refusal), and whether the transaction was still
    usable afterwards."""
    usable = False
    exc: BaseException | None = None
    answer: Any = None
    tx = conn.transaction()
    await tx.start()
    try:
        await producer.set_tenant(conn, ALPHA)
        try:
            answer = await attempt()
        except (AwoooPError, asyncpg.PostgresError) as refused:
            exc = refused
        try:
            usable = await conn.fetchval("SELECT 1") == 1
        except asyncpg.InFailedSQLTransactionError:
            usable = False
    finally:
        await tx.rollback()
    if exc is None and isinstance(answer, int):
        return f"answered {answer}", usable
    return outcome(exc, name), usable


def library_attempts(conn: Any, name: str, kind: str) -> dict[str, Callable[[], Awaitable[Any]]]:
    raw = [RawEvent("OrderPaid", "{}")]
    grant = ApprovalGranted(at=datetime.now(UTC), actor="alpha")
    attempts: dict[str, Callable[[], Awaitable[Any]]] = {
        "append_at_head": lambda: eventlog.append_at_head(conn, name, ALPHA, raw),
        "append": lambda: eventlog.append(conn, name, ALPHA, 0, [grant]),
    }
    if kind == "domain":  # the producer API names a domain stream by project and stream
        project, stream = name.removeprefix("domain/").split("/", 1)
        attempts["emit"] = lambda: producer.emit(conn, project, DomainEvent(stream, "Paid", {}))
    return attempts


async def test_a_producer_cannot_write_or_see_another_projects_streams_used_or_not(
    alpha_login: Login, db: Database
) -> None:
    names = await beta_uses_names(db)
    own = await producer.emit(db, ALPHA, DomainEvent("mine", "OrderPlaced", {}))
    before = await counts(db)
    told: dict[tuple[str, str], dict[str, str]] = {}
    conn = await alpha_login.connect()
    try:
        for kind, pair in names.items():
            for which, name in zip(("used", "free"), pair, strict=True):
                seen: dict[str, str] = {}
                for label, attempt in library_attempts(conn, name, kind).items():
                    result, usable = await try_in_transaction(conn, name, attempt)
                    assert result.startswith(("E-", POLICY)), (kind, which, label, result)
                    seen[label] = result
                    if label in ("append_at_head", "emit"):  # these promise a usable tx
                        assert usable, (kind, which, label, result)
                        assert result.startswith("E-"), (kind, which, label, result)
                event_type = "RunCreated" if kind != "domain" else "OrderPaid"
                for project in (ALPHA, BETA):
                    for label, sql in RAW_WRITES.items():
                        args = (name, project) if label != "event" else (name, project, event_type)
                        result, _ = await try_in_transaction(
                            conn, name, lambda sql=sql, args=args: conn.execute(sql, *args)
                        )
                        assert result.startswith(REFUSED), (kind, which, label, project, result)
                        seen[f"{label}@{project}"] = result
                result, _ = await try_in_transaction(
                    conn, name, lambda name=name: conn.execute(RENAME_HEAD, name, own.stream_id)
                )
                assert result.startswith(REFUSED), (kind, which, "rename_own_head", result)
                seen["rename_own_head"] = result
                for label, sql in RAW_READS.items():
                    args = (name,) if label != "move_head" else (name, ALPHA)
                    result, _ = await try_in_transaction(
                        conn, name, lambda sql=sql, args=args: conn.fetchval(sql, *args)
                    )
                    assert result == "answered 0" or result.startswith(POLICY), (
                        kind,
                        which,
                        label,
                        result,
                    )
                    seen[label] = result
                told[(kind, which)] = seen
    finally:
        await conn.close()
    for kind in names:
        assert told[(kind, "used")] == told[(kind, "free")], kind  # no existence leak
    assert await counts(db) == before  # nothing written

    # beta's revisions, emits and runs work on those very names.
    revisions = Revisions(db)
    for contract in (USED_CONTRACT, FREE_CONTRACT):
        created = await revisions.create(BETA, FAMILY, contract, {"model": "next"})
        await revisions.activate(BETA, FAMILY, contract, created.revision_id)
    for stream in (USED_DOMAIN, FREE_DOMAIN):
        emitted = await producer.emit(db, BETA, DomainEvent(stream, "OrderPaid", {"n": 2}))
        assert emitted.stream_id == producer.domain_stream_id(BETA, stream)
    run = await producer.submit(db, BETA, ChannelEvent("api", "beta-order-2", {}))
    assert run.created
    async with db.platform() as owner:
        foreign = await owner.fetchval(
            "SELECT count(*) FROM awooop_event_streams WHERE project_id = $1 "
            "AND (stream_id LIKE 'domain/beta/%' OR stream_id LIKE 'revision-beta/%')",
            ALPHA,
        )
        assert foreign == 0


async def test_the_database_holds_every_name_to_the_rule_python_checks(db: Database) -> None:
    async with db.platform() as conn:
        for stream_id, project_id, allowed in CASES:
            answer = await conn.fetchval(
                "SELECT awooop_stream_of_project($1, $2)", stream_id, project_id
            )
            assert answer is allowed, (stream_id, project_id)
        # Stored parsed (migration 0157): the CHECKs inline it without parsing it again.
        parsed = await conn.fetchval(
            "SELECT prosqlbody IS NOT NULL FROM pg_proc WHERE proname = 'awooop_stream_of_project'"
        )
        assert parsed is True


@pytest.mark.parametrize("role", ["app", "platform"])
async def test_the_runtimes_own_roles_cannot_write_another_projects_name_either(
    db: Database, role: str
) -> None:
    """The CHECK holds every role to the rule, the platform role (which bypasses row-level
    security) included."""
    before = await counts(db)
    forged = producer.domain_stream_id(BETA, FREE_DOMAIN)
    for label, sql in RAW_WRITES.items():
        args = (forged, ALPHA) if label != "event" else (forged, ALPHA, "OrderPaid")
        writes = db.tenant(ALPHA) if role == "app" else db.platform_writes()
        with pytest.raises(asyncpg.CheckViolationError) as refusal:
            async with writes as conn:
                await conn.execute(sql, *args)
        assert "stream_of_project" in str(refusal.value), label
    assert await counts(db) == before


async def test_a_forged_head_is_moved_aside_by_the_migration(
    pg_server_url: str, tmp_path: Path
) -> None:
    """A database where a producer already wrote a head under another project's name
    migrates: the head goes to awooop_quarantined_stream_heads, the other heads stay, and the
    project whose name it is can then use it."""
    before_rule = tmp_path / "migrations"
    before_rule.mkdir()
    for migration in sorted(MIGRATIONS_DIR.glob("*.sql")):
        if migration.name < "0115":
            shutil.copy(migration, before_rule / migration.name)
    name = f"awooop_sn_{uuid.uuid4().hex[:10]}"
    url = databases.with_database(pg_server_url, name)
    try:
        await migrate(url, before_rule)
        forged = producer.domain_stream_id(BETA, FREE_DOMAIN)
        own = producer.domain_stream_id(ALPHA, FREE_DOMAIN)
        conn = await asyncpg.connect(url)
        try:
            for stream_id in (forged, own):
                await conn.execute(HEAD, stream_id, ALPHA)
            await migrate(url)
            heads = [r[0] for r in await conn.fetch("SELECT stream_id FROM awooop_event_streams")]
            moved = await conn.fetch(
                "SELECT stream_id, written_for FROM awooop_quarantined_stream_heads"
            )
            async with conn.transaction():
                await conn.execute("SELECT set_config('awooop.project_id', $1, true)", BETA)
                await eventlog.append_at_head(conn, forged, BETA, [RawEvent("OrderPaid", "{}")])
        finally:
            await conn.close()
    finally:
        await databases.drop_database(pg_server_url, name)
    assert heads == [own]
    assert [tuple(r) for r in moved] == [(forged, ALPHA)]


async def test_a_producers_own_runs_pass_the_run_check_in_one_statement(
    alpha_login: Login, db: Database
) -> None:
    """The ingest statement writes each run row before its head and RunCreated, so the policy's
    run check (which must see the run) passes for a whole batch of the login's own runs."""
    conn = await alpha_login.connect()
    try:
        async with conn.transaction():
            await producer.set_tenant(conn, ALPHA)
            runs = await producer.submit_many(
                conn, ALPHA, [ChannelEvent("api", f"batch-{i}", {"i": i}) for i in range(50)]
            )
    finally:
        await conn.close()
    assert all(r.created for r in runs)
    async with db.platform() as owner:
        heads = await owner.fetchval(
            "SELECT count(*) FROM awooop_event_streams WHERE project_id = $1 "
            "AND stream_id = ANY($2::text[])",
            ALPHA,
            [run_stream_id(r.run_id) for r in runs],
        )
    assert heads == 50
