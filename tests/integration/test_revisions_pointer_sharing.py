"""Pointer checks that wait for a connection share one statement (awooop/revisions/pointer.py),
and still see every activation committed before they were made; a check already sent answers
no later call; a cancelled call that was to send the check leaves the others answered."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from awooop.core import metrics
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.revisions.pointer import PointerChecker
from awooop.revisions.service import Revisions
from tests.support.waiting import eventually

P, FAMILY = "p1", "policy_routing"
A, B = [(FAMILY, "a")], [(FAMILY, "b")]


@pytest.fixture
async def checker(settings: Settings) -> AsyncIterator[PointerChecker]:
    one = PointerChecker(settings.database_url, size=1)
    yield one
    await one.close()


def statements() -> float:
    return metrics.POINTER_CHECK_STATEMENTS._value.get()


async def waiting(checker: PointerChecker, calls: int) -> None:
    """Until ``calls`` calls wait on the checker's one connection (white-box)."""

    async def parked() -> bool:
        return sum(s.joined + 1 for s in checker._waiting.values()) == calls

    await eventually(parked, timeout_s=10, what=f"{calls} calls waiting")


async def test_calls_waiting_for_the_connection_share_one_statement_and_see_what_came_before(
    db: Database, checker: PointerChecker
) -> None:
    revisions = Revisions(db)
    first = await revisions.create(P, FAMILY, "a", {"model": "one"})
    second = await revisions.create(P, FAMILY, "a", {"model": "two"})
    await revisions.activate(P, FAMILY, "a", first.revision_id)
    await checker.check(P, A, [None])  # the connection is open and on the project
    sent, counted = checker.sent, statements()
    await checker._slots.acquire()  # white-box: the one connection is busy
    try:
        calls = [asyncio.create_task(checker.check(P, A, [None])) for _ in range(20)]
        other = asyncio.create_task(checker.check(P, B, [None]))
        await waiting(checker, 21)
        # Committed after the calls were made, before their statement is sent: they see it.
        await revisions.activate(P, FAMILY, "a", second.revision_id)
    finally:
        checker._slots.release()
    answers = await asyncio.gather(*calls)
    assert {a[0].active_revision_id for a in answers} == {second.revision_id}
    assert {a[0].body["model"] for a in answers} == {"two"}
    assert (await other)[0].active_revision_id is None
    assert len({id(a) for a in answers}) == 20  # each caller its own list
    assert checker.sent - sent == 2 and statements() - counted == 2  # "a" once, "b" once


async def test_a_check_already_sent_answers_no_later_call(
    database_url: str, db: Database, checker: PointerChecker
) -> None:
    """The first call's statement is held by a lock on the pointer table; calls made while it
    is in flight wait for the next statement."""
    await checker.check(P, A, [None])
    sent = checker.sent
    admin = await asyncpg.connect(database_url)
    try:
        async with admin.transaction():
            await admin.execute("LOCK TABLE awooop_active_revisions IN ACCESS EXCLUSIVE MODE")
            first = asyncio.create_task(checker.check(P, A, [None]))

            async def in_flight() -> bool:
                return checker.sent == sent + 1 and not checker._waiting

            await eventually(in_flight, timeout_s=10, what="the first check sent")
            later = [asyncio.create_task(checker.check(P, A, [None])) for _ in range(5)]
            await waiting(checker, 5)
            assert not first.done()
    finally:
        await admin.close()
    await asyncio.gather(first, *later)
    assert checker.sent == sent + 2


async def test_a_cancelled_caller_that_was_to_send_the_check_leaves_the_others_answered(
    db: Database, checker: PointerChecker
) -> None:
    revisions = Revisions(db)
    live = await revisions.create(P, FAMILY, "a", {"model": "one"})
    await revisions.activate(P, FAMILY, "a", live.revision_id)
    await checker._slots.acquire()
    try:
        leader = asyncio.create_task(checker.check(P, A, [None]))
        await waiting(checker, 1)
        followers = [asyncio.create_task(checker.check(P, A, [None])) for _ in range(3)]
        await waiting(checker, 4)
        leader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await leader
    finally:
        checker._slots.release()
    answers = await asyncio.gather(*followers)
    assert {a[0].active_revision_id for a in answers} == {live.revision_id}
    assert not checker._waiting
