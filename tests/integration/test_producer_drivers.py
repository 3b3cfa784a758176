"""The producer library on every driver it takes (docs/ingest.md, Producer library): asyncpg,
psycopg (async and sync), SQLAlchemy (asyncpg and psycopg dialects, async and sync) and
Django, each inside the caller's own transaction on a producer login bound to one project.
The same tests for all (tests/support/producer_drivers.py): the writes commit and roll back
with the caller's own row, a repeated key is one run, refusals are typed and leave the
transaction usable, the tenant guard holds, signals are written pending."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from awooop.core.db import Database
from awooop.core.errors import (
    AwoooPError,
    DatabaseRefusedError,
    InvalidInputError,
    ProducerConnectionError,
    ProducerTransactionError,
    RunNotFoundError,
    TenantNotGrantedError,
    UnknownChannelError,
)
from awooop.producer import ChannelEvent, DomainEvent
from tests.support.logins import Login, bound_login
from tests.support.producer_drivers import DRIVERS, Rollback
from tests.support.runs import create_runs

PROJECT = "shop"
OTHER = "other-shop"


@pytest.fixture(params=sorted(DRIVERS))
def driver(request: pytest.FixtureRequest) -> Any:
    return DRIVERS[request.param]


@pytest.fixture
async def login(db: Database, database_url: str) -> AsyncIterator[Login]:
    """A producer login bound to PROJECT only, its table ``orders``, and an agent contract of
    PROJECT with ``max_attempts`` 7 (each submit reads it)."""
    async with db.tenant(PROJECT) as conn:
        revision = await conn.fetchval(
            "INSERT INTO awooop_contract_revisions "
            "(project_id, contract_family, contract_id, body, body_hash) "
            "VALUES ($1, 'agent', 'default', $2, 'h') RETURNING revision_id",
            PROJECT,
            {"max_attempts": 7},
        )
        await conn.execute(
            "INSERT INTO awooop_active_revisions "
            "(project_id, contract_family, contract_id, active_revision_id) "
            "VALUES ($1, 'agent', 'default', $2)",
            PROJECT,
            revision,
        )
    async with bound_login(database_url, [PROJECT]) as service:
        owner = await asyncpg.connect(database_url)
        try:
            await owner.execute("CREATE TABLE orders (id int PRIMARY KEY, doc jsonb)")
            await owner.execute(f"GRANT SELECT, INSERT ON orders TO {service.role}")
            yield service
            await owner.execute("DROP TABLE orders")
        finally:
            await owner.close()


async def counts(db: Database, database_url: str, project: str = PROJECT) -> dict[str, int]:
    async with db.tenant(project) as conn:
        runs = await conn.fetchval("SELECT count(*) FROM awooop_run_state")
        domain = await conn.fetchval(
            "SELECT count(*) FROM awooop_events WHERE stream_id LIKE 'domain/%'"
        )
        signals = await conn.fetchval("SELECT count(*) FROM awooop_signals")
    owner = await asyncpg.connect(database_url)
    try:
        orders = await owner.fetchval("SELECT count(*) FROM orders")
    finally:
        await owner.close()
    return {"runs": runs, "domain": domain, "signals": signals, "orders": orders}


def event(key: str, **data: Any) -> ChannelEvent:
    return ChannelEvent("api", key, data)


async def produce(tx: Any, order: int) -> list[Any]:
    """What a service does in its transaction: the tenant, its own row, then every call."""
    await tx.call("set_tenant", PROJECT)
    await tx.own_row(order)
    one = await tx.call("submit", PROJECT, event(f"o-{order}", o=order))
    many = await tx.call("submit_many", PROJECT, [event(f"o-{order}-{i}", i=i) for i in (1, 2)])
    emitted = await tx.call("emit", PROJECT, DomainEvent(f"order-{order}", "OrderPaid", {}))
    both = await tx.call(
        "emit_many",
        PROJECT,
        [DomainEvent(f"order-{order}", "OrderShipped", {}), DomainEvent("all", "Seen", {})],
    )
    return [one, *many, emitted, *both]


async def test_writes_commit_and_roll_back_with_the_callers_transaction(
    db: Database, database_url: str, login: Login, driver: Any
) -> None:
    nothing = {"runs": 0, "domain": 0, "signals": 0, "orders": 0}
    async with driver(login.url) as tx:
        await produce(tx, 1)
        raise Rollback
    assert await counts(db, database_url) == nothing
    async with driver(login.url) as tx:
        one, first, second, emitted, shipped, seen = await produce(tx, 1)
    assert all(r.created for r in (one, first, second))
    assert (emitted.stream_id, emitted.version) == ("domain/shop/order-1", 1)
    assert (shipped.version, seen.stream_id) == (2, "domain/shop/all")
    assert await counts(db, database_url) == {**nothing, "runs": 3, "domain": 3, "orders": 1}
    async with db.tenant(PROJECT) as conn:
        row = await conn.fetchrow(
            "SELECT status, max_attempts, input FROM awooop_run_state WHERE run_id = $1",
            one.run_id,
        )
    assert (row["status"], row["max_attempts"], row["input"]) == ("PENDING", 7, {"o": 1})
    async with driver(login.url) as tx:  # a second transaction on the driver: cached config
        again = await produce(tx, 2)
    assert again[0].created and again[3].version == 1
    assert await counts(db, database_url) == {**nothing, "runs": 6, "domain": 6, "orders": 2}


async def test_a_repeated_key_is_one_run(
    db: Database, database_url: str, login: Login, driver: Any
) -> None:
    async with driver(login.url) as tx:
        await tx.call("set_tenant", PROJECT)
        first = await tx.call("submit", PROJECT, event("k"))
        batch = await tx.call("submit_many", PROJECT, [event("k"), event("j"), event("j")])
    async with driver(login.url) as tx:
        await tx.call("set_tenant", PROJECT)
        later = await tx.call("submit", PROJECT, event("k"))
    assert first.created and not later.created and later.run_id == first.run_id
    assert [(r.run_id == first.run_id, r.created) for r in batch] == [
        (True, False),
        (False, True),
        (False, False),
    ]
    assert batch[1].run_id == batch[2].run_id
    assert (await counts(db, database_url))["runs"] == 2


async def refused(tx: Any, error: type[AwoooPError], code: str, *args: Any, **kw: Any) -> None:
    name, *rest = args
    with pytest.raises(error) as caught:
        await tx.call(name, *rest, **kw)
    assert caught.value.code == code


async def test_refusals_are_typed_and_the_transaction_goes_on(
    db: Database, database_url: str, login: Login, driver: Any
) -> None:
    [foreign] = await create_runs(db, OTHER)
    poisoned = [event("a"), event("b", text="nul \x00 inside"), event("c")]
    async with driver(login.url) as tx:
        await tx.call("set_tenant", PROJECT)
        # the tenant guard: another project's runs, with the transaction's tenant or its own
        await refused(tx, ProducerTransactionError, "E-INGEST-001", "submit", OTHER, event("x"))
        await refused(tx, ProducerTransactionError, "E-INGEST-001", "emit", OTHER,
                      DomainEvent("s", "Seen", {}))  # fmt: skip
        await tx.call("set_tenant", OTHER)
        await refused(tx, TenantNotGrantedError, "E-INGEST-003", "submit", OTHER, event("x"))
        await refused(tx, TenantNotGrantedError, "E-INGEST-003", "submit_many", OTHER,
                      [event("x")])  # fmt: skip
        await tx.call("set_tenant", PROJECT)
        await refused(tx, RunNotFoundError, "E-RUN-003", "signal", PROJECT, foreign, "paid",
                      key="k")  # fmt: skip
        # bad input: refused before anything is written, the whole batch with one bad event
        await refused(tx, InvalidInputError, "E-INPUT-001", "submit_many", PROJECT, poisoned)
        await refused(tx, UnknownChannelError, "E-CHANNEL-001", "submit", PROJECT,
                      ChannelEvent("fax", "k", {}))  # fmt: skip
        await refused(tx, InvalidInputError, "E-INPUT-001", "emit", PROJECT,
                      DomainEvent("s", "RunCreated", {}))  # fmt: skip
        # ... and the transaction is still usable: the caller's row and a submit commit
        await tx.own_row(1)
        ok = await tx.call("submit", PROJECT, event("a"))
    assert ok.created
    assert await counts(db, database_url) == {"runs": 1, "domain": 0, "signals": 0, "orders": 1}
    assert await counts(db, database_url, OTHER) == {
        "runs": 1,  # create_runs' own
        "domain": 0,
        "signals": 0,
        "orders": 1,
    }


async def test_signals_are_written_pending_with_the_transaction(
    db: Database, database_url: str, login: Login, driver: Any
) -> None:
    async with driver(login.url) as tx:
        await tx.call("set_tenant", PROJECT)
        run = await tx.call("submit", PROJECT, event("r"))
    async with driver(login.url) as tx:
        await tx.call("set_tenant", PROJECT)
        await tx.call("signal", PROJECT, run.run_id, "paid", {"n": 0}, key="gone")
        raise Rollback
    async with driver(login.url) as tx:
        await tx.call("set_tenant", PROJECT)
        sent = await tx.call("signal", PROJECT, run.run_id, "paid", {"n": 1}, key="k1")
        again = await tx.call("signal", PROJECT, run.run_id, "paid", {"n": 2}, key="k1")
    assert not sent.duplicate and again.duplicate and again.signal_id == sent.signal_id
    async with db.tenant(PROJECT) as conn:
        rows = await conn.fetch("SELECT signal_key, payload, pending FROM awooop_signals")
    assert [(r["signal_key"], r["payload"], r["pending"]) for r in rows] == [("k1", {"n": 1}, True)]


async def test_a_database_that_refuses_the_write_is_a_typed_error(
    db: Database, database_url: str, login: Login, driver: Any
) -> None:
    """A read-only transaction (as during a failover's demotion): E-DB-002, retryable, from
    every driver's own error; nothing written."""
    async with driver(login.url) as tx:
        await tx.execute("SET TRANSACTION READ ONLY")
        await tx.call("set_tenant", PROJECT)
        with pytest.raises(DatabaseRefusedError) as caught:
            await tx.call("submit", PROJECT, event("k"))
        assert (caught.value.code, caught.value.retryable) == ("E-DB-002", True)
        raise Rollback
    assert (await counts(db, database_url))["runs"] == 0


async def test_outside_a_transaction_nothing_is_written(
    db: Database, database_url: str, login: Login, driver: Any
) -> None:
    async with driver(login.url, begin=False) as tx:
        await refused(tx, ProducerTransactionError, "E-INGEST-001", "set_tenant", PROJECT)
        await refused(tx, ProducerTransactionError, "E-INGEST-001", "submit", PROJECT, event("k"))
        await refused(tx, ProducerTransactionError, "E-INGEST-001", "emit", PROJECT,
                      DomainEvent("s", "Seen", {}))  # fmt: skip
    assert (await counts(db, database_url))["runs"] == 0


async def test_a_psycopg_connection_with_adapters_of_its_own(
    db: Database, database_url: str, login: Login
) -> None:
    """The service's own adapters and row factory (uuids read as text, text dumped as
    ``text``, dict rows): the producer gets psycopg's on its own cursors, the connection keeps
    the service's."""
    import psycopg
    from psycopg.rows import dict_row
    from psycopg.types.string import StrDumper, TextLoader

    from awooop import producer

    async with await psycopg.AsyncConnection.connect(login.url, row_factory=dict_row) as conn:
        conn.adapters.register_loader("uuid", TextLoader)
        conn.adapters.register_dumper(str, StrDumper)
        async with conn.transaction():
            await producer.set_tenant(conn, PROJECT)
            one = await producer.submit(conn, PROJECT, event("k"))
            again = await producer.submit(conn, PROJECT, event("k"))
            sent = await producer.signal(conn, PROJECT, one.run_id, "paid", {"n": 1}, key="s")
        assert isinstance(one.run_id, uuid.UUID) and isinstance(sent.signal_id, uuid.UUID)
        assert (one.created, again.created, again.run_id) == (True, False, one.run_id)
        async with conn.transaction():  # the service's own read, as the service set it up
            await producer.set_tenant(conn, PROJECT)
            cursor = await conn.execute("SELECT run_id FROM awooop_run_state")
            assert await cursor.fetchall() == [{"run_id": str(one.run_id)}]
    assert (await counts(db, database_url))["runs"] == 1


async def test_a_connection_the_producer_does_not_take_is_named() -> None:
    import psycopg

    from awooop import producer
    from awooop.producer import sync

    with pytest.raises(ProducerConnectionError, match="takes") as caught:
        await producer.submit(object(), PROJECT, event("k"))  # type: ignore[arg-type]
    assert caught.value.code == "E-INGEST-005"
    # the right connection for the other API: the refusal names the API to use (types only:
    # no connection is opened)
    async_conn = psycopg.AsyncConnection.__new__(psycopg.AsyncConnection)
    with pytest.raises(ProducerConnectionError, match=r"awooop\.producer \(async\)"):
        sync.submit(async_conn, PROJECT, event("k"))
    sync_conn = psycopg.Connection.__new__(psycopg.Connection)
    with pytest.raises(ProducerConnectionError, match=r"awooop\.producer\.sync"):
        await producer.submit(sync_conn, PROJECT, event("k"))


def test_the_core_install_imports_no_optional_driver() -> None:
    code = (
        "import sys, awooop.producer, awooop.producer.sync, awooop.cli\n"
        "loaded = sorted(m for m in ('psycopg', 'sqlalchemy', 'django') if m in sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
