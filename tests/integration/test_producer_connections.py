"""The producer library on a service's own connections as they come: a plain
``asyncpg.connect``, a pool made without ``init``, a connection whose JSON codecs are the
service's own. The producer needs nothing from the connection, and leaves its codecs alone."""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from awooop import producer
from awooop.core.db import Database
from awooop.core.errors import ProducerConnectionError
from awooop.producer import ChannelEvent, DomainEvent
from tests.support.logins import Login, bound_login

PROJECT = "shop"


@pytest.fixture
async def login(db: Database, database_url: str) -> AsyncIterator[Login]:
    """A producer service's login bound to PROJECT, a table of its own, and an active agent
    contract of PROJECT with ``max_attempts`` 7 (read through JSON on every submit)."""
    async with db.tenant(PROJECT) as conn:
        revision = await conn.fetchval(
            "INSERT INTO awooop_contract_revisions "
            "(project_id, contract_family, contract_id, body, body_hash) "
            "VALUES ($1, 'agent', 'default', $2, 'h') RETURNING revision_id",
            PROJECT,
            {"max_attempts": 7, "model": "local"},
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
            await owner.execute("DROP TABLE orders")  # its grant, before the role goes
        finally:
            await owner.close()


async def produce(conn: Any, order: int) -> list[Any]:
    """What a service does in one transaction: its own row (JSON as text, asyncpg's default),
    then submit, submit_many and emit; what each returned."""
    async with conn.transaction():
        await producer.set_tenant(conn, PROJECT)
        await conn.execute("INSERT INTO orders VALUES ($1, $2)", order, json.dumps({"o": order}))
        one = await producer.submit(conn, PROJECT, ChannelEvent("api", f"o-{order}", {"o": 1}))
        many = await producer.submit_many(
            conn, PROJECT, [ChannelEvent("api", f"o-{order}-{i}", {"i": i}) for i in range(3)]
        )
        emitted = await producer.emit(
            conn, PROJECT, DomainEvent(f"order-{order}", "OrderPaid", {"order": order})
        )
    return [one, *many, emitted]


async def check(db: Database, conn: Any, order: int, results: list[Any]) -> None:
    one, *many, emitted = results
    assert one.created and all(r.created for r in many) and emitted.version == 1
    async with db.tenant(PROJECT) as tenant:
        attempts = await tenant.fetch(
            "SELECT max_attempts FROM awooop_run_state WHERE run_id = ANY($1::uuid[])",
            [r.run_id for r in [one, *many]],
        )
    assert [r["max_attempts"] for r in attempts] == [7] * 4  # the contract's, not the default
    # the service's own JSON on the same connection means what it meant before the producer
    assert await conn.fetchval("SELECT doc->>'o' FROM orders WHERE id = $1", order) == str(order)
    assert await conn.fetchval("SELECT doc FROM orders WHERE id = $1", order) == json.dumps(
        {"o": order}
    )


async def test_a_plain_connection(db: Database, login: Login) -> None:
    conn = await asyncpg.connect(login.url)
    try:
        await check(db, conn, 1, await produce(conn, 1))
        await check(db, conn, 2, await produce(conn, 2))  # the configuration cached
    finally:
        await conn.close()


async def test_a_pool_without_init(db: Database, login: Login) -> None:
    pool = await asyncpg.create_pool(login.url, min_size=1, max_size=2)
    try:
        for order in (1, 2, 3):
            async with pool.acquire() as conn:
                await check(db, conn, order, await produce(conn, order))
    finally:
        await pool.close()


async def test_a_connection_with_the_services_own_json_codecs(db: Database, login: Login) -> None:
    conn = await asyncpg.connect(login.url)
    try:
        for name in ("json", "jsonb"):
            await conn.set_type_codec(
                name, schema="pg_catalog", encoder=json.dumps, decoder=json.loads
            )
        results = await produce_with_objects(conn, 1)
        one, *_ = results
        assert one.created
        # the service's codec still decodes its reads (it was not replaced)
        assert await conn.fetchval("SELECT doc FROM orders WHERE id = 1") == {"o": 1}
    finally:
        await conn.close()


async def produce_with_objects(conn: Any, order: int) -> list[Any]:
    """:func:`produce` for a connection whose jsonb codec takes Python objects."""
    async with conn.transaction():
        await producer.set_tenant(conn, PROJECT)
        await conn.execute("INSERT INTO orders VALUES ($1, $2)", order, {"o": order})
        one = await producer.submit(conn, PROJECT, ChannelEvent("api", uuid.uuid4().hex, {}))
        emitted = await producer.emit(conn, PROJECT, DomainEvent("s", "OrderPaid", {"o": 1}))
    return [one, emitted]


async def test_init_connection_is_the_hook_for_a_services_pool(db: Database, login: Login) -> None:
    pool = await asyncpg.create_pool(
        login.url, min_size=1, max_size=1, init=producer.init_connection
    )
    try:
        async with pool.acquire() as conn:
            await check(db, conn, 1, await produce(conn, 1))
    finally:
        await pool.close()


async def test_codecs_that_refuse_its_arguments_are_named_and_nothing_is_written(
    db: Database, login: Login
) -> None:
    conn = await asyncpg.connect(login.url)
    try:
        # a service's own uuid codec that takes its text form only
        await conn.set_type_codec(
            "uuid", schema="pg_catalog", encoder=lambda text: uuid.UUID(text).hex, decoder=str
        )
        async with conn.transaction():
            await producer.set_tenant(conn, PROJECT)
            with pytest.raises(ProducerConnectionError, match="init_connection") as refused:
                await producer.submit(conn, PROJECT, ChannelEvent("api", "k", {}))
            assert refused.value.code == "E-INGEST-005"
            with pytest.raises(ProducerConnectionError):
                await producer.emit(conn, PROJECT, DomainEvent("s", "OrderPaid", {}))
            await conn.execute("INSERT INTO orders VALUES (1, $1)", "{}")  # still usable
    finally:
        await conn.close()
    async with db.tenant(PROJECT) as tenant:
        assert await tenant.fetchval("SELECT count(*) FROM awooop_run_state") == 0
        assert await tenant.fetchval("SELECT count(*) FROM awooop_events") == 0


INGEST_PLANS = (
    "SELECT coalesce(sum(generic_plans), 0) AS generic, coalesce(sum(custom_plans), 0) AS custom "
    "FROM pg_prepared_statements WHERE statement LIKE '%ingest.insert_new%'"
)


async def test_create_pool_is_the_way_to_produce_through_a_pool(db: Database, login: Login) -> None:
    inits: list[object] = []

    async def own_init(conn: Any) -> None:  # the service's own init runs after the producer's
        inits.append(conn.get_settings().application_name)

    pool = await producer.create_pool(login.url, min_size=1, max_size=1, init=own_init)
    try:
        for order in (1, 2, 3):
            async with pool.acquire() as conn:
                await check(db, conn, order, await produce(conn, order))
        async with pool.acquire() as conn:
            # one generic plan of the ingest statement, never planned per execution
            plans = await conn.fetchrow(INGEST_PLANS)
            assert (plans["generic"] >= 3, plans["custom"]) == (True, 0)
            assert await conn.fetchval("SHOW jit") == "off"
            sock = conn._con._transport.get_extra_info("socket")  # dead-peer detection is on
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            await conn.execute("SET application_name = 'left-behind'")
        async with pool.acquire() as conn:  # released as it was: no RESET ALL round trip
            assert await conn.fetchval("SHOW application_name") == "left-behind"
    finally:
        await pool.close()
    assert len(inits) == 1

    resetting = await producer.create_pool(login.url, min_size=1, max_size=1, session_reset=True)
    try:
        async with resetting.acquire() as conn:
            await conn.execute("SET application_name = 'left-behind'")
        async with resetting.acquire() as conn:
            assert await conn.fetchval("SHOW application_name") != "left-behind"
    finally:
        await resetting.close()
