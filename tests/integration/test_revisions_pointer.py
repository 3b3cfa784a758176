"""The pointer check: one round trip, several contracts per query, RLS intact (R-24, R-43)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from awooop.core import metrics
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import DatabaseUnavailableError
from awooop.core.pools import SET_SESSION_TENANT
from awooop.revisions.cache import RevisionCache
from awooop.revisions.effective import PolicyResolver
from awooop.revisions.pointer import POINTER_CHECK_MANY, POINTER_CHECK_ONE, PointerChecker
from awooop.revisions.service import Revisions

P, FAMILY = "p1", "policy_routing"


@pytest.fixture
async def pointers(settings: Settings) -> AsyncIterator[PointerChecker]:
    checker = PointerChecker(settings.database_url, size=2)
    yield checker
    await checker.close()


async def test_several_contracts_in_one_query_with_bodies_only_where_they_differ(
    db: Database, pointers: PointerChecker
) -> None:
    revisions = Revisions(db)
    a = await revisions.create(P, FAMILY, "a", {"model": "A"})
    b = await revisions.create(P, FAMILY, "b", {"model": "B"})
    await revisions.activate(P, FAMILY, "a", a.revision_id)
    await revisions.activate(P, FAMILY, "b", b.revision_id)
    got = await pointers.check(
        P, [(FAMILY, "a"), (FAMILY, "b"), (FAMILY, "none")], [a.revision_id, None, None]
    )
    assert [(g.contract_id, g.active_revision_id) for g in got] == [
        ("a", a.revision_id),
        ("b", b.revision_id),
        ("none", None),
    ]
    assert (got[0].body, got[0].body_hash) == (None, None)  # cached == active: no body
    assert (got[1].body, got[1].body_hash) == ({"model": "B"}, b.body_hash)
    assert got[2].body is None


async def test_row_level_security_holds_when_a_connection_switches_projects(
    db: Database, settings: Settings
) -> None:
    revisions = Revisions(db)
    theirs = await revisions.create("p2", FAMILY, "a", {"model": "X"})
    await revisions.activate("p2", FAMILY, "a", theirs.revision_id)
    checker = PointerChecker(settings.database_url, size=1)  # one connection for both
    try:
        (mine,) = await checker.check(P, [(FAMILY, "a")], [None])
        pid = checker._idle[0].conn.get_server_pid()  # white-box: the dedicated connection
        assert mine.active_revision_id is None
        (seen,) = await checker.check("p2", [(FAMILY, "a")], [None])
        assert seen.active_revision_id == theirs.revision_id
        (again,) = await checker.check(P, [(FAMILY, "a")], [None])
        assert again.active_revision_id is None
        many = await checker.check(P, [(FAMILY, "a"), (FAMILY, "b")], [None, None])
        assert [m.active_revision_id for m in many] == [None, None]
        assert checker._idle[0].conn.get_server_pid() == pid
    finally:
        await checker.close()


async def test_a_check_is_one_autocommit_statement(
    database_url: str, pointers: PointerChecker
) -> None:
    """No BEGIN/SET/COMMIT around it: the server saw exactly the prepared pointer statement
    as the connection's last query and no transaction is left open."""
    for contracts, statement in (
        ([(FAMILY, "a")], POINTER_CHECK_ONE),
        ([(FAMILY, "a"), (FAMILY, "b")], POINTER_CHECK_MANY),
    ):
        await pointers.check(P, contracts, [None] * len(contracts))
        pid = pointers._idle[0].conn.get_server_pid()  # white-box: the dedicated connection
        admin = await asyncpg.connect(database_url)
        try:
            state = await admin.fetchrow(
                "SELECT query, state, backend_xid FROM pg_stat_activity WHERE pid = $1", pid
            )
        finally:
            await admin.close()
        assert state is not None
        assert state["query"] == statement
        assert state["state"] == "idle"
        assert state["backend_xid"] is None


async def test_the_resolver_counts_hits_misses_and_stale_entries(
    db: Database, pointers: PointerChecker
) -> None:
    revisions = Revisions(db)
    r1 = await revisions.create(P, FAMILY, "default", {"model": "one"})
    r2 = await revisions.create(P, FAMILY, "default", {"model": "two"})
    await revisions.activate(P, FAMILY, "default", r1.revision_id)
    resolver = PolicyResolver(RevisionCache(), pointers)

    def counts() -> tuple[float, float, float]:
        return (
            metrics.REVISION_CACHE_HITS._value.get(),
            metrics.REVISION_CACHE_MISSES._value.get(),
            metrics.REVISION_CACHE_STALE.labels("pointer_check")._value.get(),
        )

    start = counts()
    first = await resolver.get_effective_policy(P, FAMILY, "default")
    second = await resolver.get_effective_policy(P, FAMILY, "default")
    await revisions.activate(P, FAMILY, "default", r2.revision_id)
    third = await resolver.get_effective_policy(P, FAMILY, "default")
    end = counts()
    assert (first.revision_id, first.body) == (r1.revision_id, {"model": "one"})
    assert second.revision_id == r1.revision_id
    assert (third.revision_id, third.body, third.body_hash) == (
        r2.revision_id,
        {"model": "two"},
        r2.body_hash,
    )
    assert tuple(e - s for s, e in zip(start, end, strict=True)) == (1, 1, 1)
    entry = resolver.cache.get((P, FAMILY, "default"))
    assert entry is not None and entry.revision_id == r2.revision_id


async def test_no_active_revision_gives_the_empty_default_policy(
    pointers: PointerChecker,
) -> None:
    resolver = PolicyResolver(RevisionCache(), pointers)
    policy = await resolver.get_effective_policy(P, FAMILY, "default")
    assert (policy.revision_id, policy.body, policy.body_hash) == (None, {}, None)


async def test_revalidation_drops_entries_whose_pointer_moved(
    db: Database, pointers: PointerChecker
) -> None:
    revisions = Revisions(db)
    r1 = await revisions.create(P, "channel_event", "telegram", {"v": 1})
    r2 = await revisions.create(P, "channel_event", "telegram", {"v": 2})
    await revisions.activate(P, "channel_event", "telegram", r1.revision_id)
    resolver = PolicyResolver(RevisionCache(), pointers, 30.0, 300.0)
    cached = await resolver.get_cached_policy(P, "channel_event", "telegram")
    assert cached.revision_id == r1.revision_id
    await revisions.activate(P, "channel_event", "telegram", r2.revision_id)
    entry = resolver.cache.get((P, "channel_event", "telegram"))
    assert entry is not None
    # Not yet due (channel_event: 300 s): the cached read still answers r1 ...
    assert await resolver.revalidate(now=entry.validated_at + 299) == 0
    assert (await resolver.get_cached_policy(P, "channel_event", "telegram")).revision_id == (
        r1.revision_id
    )
    # ... once due, re-validation finds the pointer moved and drops it.
    assert await resolver.revalidate(now=entry.validated_at + 301) == 1
    fresh = await resolver.get_cached_policy(P, "channel_event", "telegram")
    assert fresh.revision_id == r2.revision_id


async def test_a_broken_connection_is_replaced_transparently(
    database_url: str, pointers: PointerChecker
) -> None:
    await pointers.check(P, [(FAMILY, "a")], [None])
    pid = pointers._idle[0].conn.get_server_pid()  # white-box: the dedicated connection
    admin = await asyncpg.connect(database_url)
    try:
        assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
    finally:
        await admin.close()
    (answer,) = await pointers.check(P, [(FAMILY, "a")], [uuid.uuid4()])
    assert answer.active_revision_id is None
    assert pointers._idle[0].conn.get_server_pid() != pid


async def test_an_unreachable_database_is_e_db_001() -> None:
    checker = PointerChecker("postgresql://postgres@127.0.0.1:1/none", size=1)
    await checker.warm()  # a worker starting while the database restarts does not die here
    with pytest.raises(DatabaseUnavailableError):
        await checker.check(P, [(FAMILY, "a")], [None])
    await checker.close()


async def test_the_plan_probes_one_pointer_per_contract_and_skips_bodies_on_a_hit(
    database_url: str, db: Database
) -> None:
    """The plans, seen through auto_explain as the checker runs them: a primary-key probe per
    contract (not a scan of the project's pointers) and no body lookup when cached == active."""
    revisions = Revisions(db)
    hot = None
    for n in range(30):
        r = await revisions.create(P, FAMILY, f"c{n}", {"model": str(n)})
        await revisions.activate(P, FAMILY, f"c{n}", r.revision_id)
        hot = hot or r
    assert hot is not None
    conn = await asyncpg.connect(database_url)
    plans: list[str] = []
    conn.add_log_listener(lambda _c, message: plans.append(message.message))
    try:
        await conn.execute("LOAD 'auto_explain'")
        for setting, value in (
            ("auto_explain.log_min_duration", "0"),
            ("auto_explain.log_analyze", "on"),
            ("auto_explain.log_level", "notice"),
        ):
            await conn.execute(f"SET {setting} = {value}")
        await conn.execute("SET ROLE awooop_app")
        await conn.execute(SET_SESSION_TENANT, P)
        one = await conn.fetch(POINTER_CHECK_ONE, P, FAMILY, "c0", hot.revision_id)
        many = await conn.fetch(POINTER_CHECK_MANY, P, [FAMILY], ["c0"], [hot.revision_id])
    finally:
        await conn.close()
    for rows, active in ((one, "active_revision_id"), (many, "active_revision_id")):
        assert rows[0][active] == hot.revision_id and rows[0]["body"] is None
    for statement in (POINTER_CHECK_ONE, POINTER_CHECK_MANY):
        (plan,) = [p for p in plans if statement.strip().splitlines()[0] in p]
        probe = plan[plan.index("awooop_active_revisions_pkey") :].splitlines()[1]
        assert "Index Cond: ((project_id = " in probe
        assert "contract_family = " in probe and "contract_id = " in probe
        assert "Bitmap" not in plan and "Hash" not in plan and "Seq Scan" not in plan
        body_scan = plan[plan.index("awooop_contract_revisions_pkey") :].splitlines()[0]
        assert "never executed" in body_scan
