"""The revision write path on real Postgres: one transaction per activation (R-20, R-21, R-30)."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from awooop.core.db import Connection, Database
from awooop.core.errors import (
    InvalidContractBodyError,
    InvalidInputError,
    NoActiveRevisionError,
    NothingToRollBackError,
    RevisionConflictError,
    RevisionContractMismatchError,
    RevisionNotFoundError,
)
from awooop.core.events import RevisionActivated, RevisionCreated, decode_event, revision_stream_id
from awooop.eventlog import eventlog
from awooop.revisions.body import body_hash
from awooop.revisions.service import Revisions
from awooop.revisions.writes import Stage
from tests.support.properties import ON_DATABASE

P, FAMILY, CONTRACT = "p1", "policy_routing", "default"
NO_NUL = st.characters(
    blacklist_categories=("Cs",), blacklist_characters="\x00"
)  # refused on create, tested below


class InjectedFault(Exception):
    pass


async def pointer(db: Database, project: str = P, contract: str = CONTRACT) -> uuid.UUID | None:
    async with db.platform() as conn:
        value: uuid.UUID | None = await conn.fetchval(
            "SELECT active_revision_id FROM awooop_active_revisions "
            "WHERE project_id = $1 AND contract_family = $2 AND contract_id = $3",
            project,
            FAMILY,
            contract,
        )
    return value


async def outbox(db: Database) -> list[dict[str, Any]]:
    async with db.platform() as conn:
        rows = await conn.fetch("SELECT * FROM awooop_contract_outbox ORDER BY created_at")
    return [dict(r.items()) for r in rows]


async def stream(db: Database, project: str = P, contract: str = CONTRACT) -> list[Any]:
    async with db.tenant(project) as conn:
        recorded = await eventlog.read_stream(conn, revision_stream_id(project, FAMILY, contract))
    return [decode_event(e.data) for e in recorded]


async def test_create_stores_the_body_its_canonical_hash_and_an_event(db: Database) -> None:
    revisions = Revisions(db)
    body = {"model": "qwen", "options": {"temperature": 0.2}}
    created = await revisions.create(P, FAMILY, CONTRACT, body)
    assert created.body_hash == body_hash(body)
    shown = await revisions.get(P, created.revision_id)
    assert (shown.body, shown.body_hash, shown.active) == (body, created.body_hash, False)
    (event,) = await stream(db)
    assert isinstance(event, RevisionCreated)
    assert (event.revision_id, event.body_hash) == (created.revision_id, created.body_hash)


@settings(ON_DATABASE, max_examples=25)
@given(
    body=st.dictionaries(
        st.text(NO_NUL, max_size=6),
        st.none()
        | st.booleans()
        | st.integers(-(2**53), 2**53)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.sampled_from([1e16, 1e300, 1.5e-7, -0.0, 2.5e20, 1.0])
        | st.text(NO_NUL, max_size=10)
        | st.lists(st.integers(), max_size=3),
        max_size=5,
    )
)
async def test_the_body_read_back_from_jsonb_hashes_to_the_stored_hash(
    db: Database, body: dict[str, Any]
) -> None:
    """Any JSON object, so a family without a body schema (``hashprop``): a policy_routing
    body is also checked field by field (``{"system": False}`` is refused), which is not this
    property; those refusals are tested below."""
    revisions = Revisions(db)
    created = await revisions.create(P, "hashprop", "hashprop", body)
    shown = await revisions.get(P, created.revision_id)
    assert body_hash(shown.body) == shown.body_hash == created.body_hash


async def test_bad_input_is_refused_and_writes_nothing(db: Database) -> None:
    revisions = Revisions(db)
    with pytest.raises(InvalidContractBodyError):
        await revisions.create(P, FAMILY, CONTRACT, ["not", "an", "object"])
    with pytest.raises(InvalidContractBodyError):
        await revisions.create(P, FAMILY, CONTRACT, {"model": 7})
    with pytest.raises(InvalidContractBodyError):
        await revisions.create(P, FAMILY, CONTRACT, {"system": "nul\x00"})
    with pytest.raises(InvalidInputError):
        await revisions.create(P, "Bad Family", CONTRACT, {})
    assert await revisions.revisions(P) == []
    assert await stream(db) == []


async def test_activation_moves_the_pointer_appends_the_event_and_writes_the_outbox(
    db: Database,
) -> None:
    revisions = Revisions(db)
    r1 = await revisions.create(P, FAMILY, CONTRACT, {"model": "a"})
    r2 = await revisions.create(P, FAMILY, CONTRACT, {"model": "b"})
    first = await revisions.activate(P, FAMILY, CONTRACT, r1.revision_id, expected=None)
    second = await revisions.activate(P, FAMILY, CONTRACT, r2.revision_id, expected=r1.revision_id)
    assert (first.old_revision_id, first.new_revision_id) == (None, r1.revision_id)
    assert (second.old_revision_id, second.new_revision_id) == (r1.revision_id, r2.revision_id)
    assert await pointer(db) == r2.revision_id
    rows = await outbox(db)
    assert [(r["old_revision_id"], r["new_revision_id"]) for r in rows] == [
        (None, r1.revision_id),
        (r1.revision_id, r2.revision_id),
    ]
    assert [r["event_id"] for r in rows] == [first.event_id, second.event_id]
    assert all(r["delivered_at"] is None and r["event_type"] == "revision_activated" for r in rows)
    activations = [e for e in await stream(db) if isinstance(e, RevisionActivated)]
    assert [(e.old_revision_id, e.new_revision_id) for e in activations] == [
        (None, r1.revision_id),
        (r1.revision_id, r2.revision_id),
    ]


async def test_activating_the_active_revision_again_writes_nothing(db: Database) -> None:
    revisions = Revisions(db)
    r1 = await revisions.create(P, FAMILY, CONTRACT, {"model": "a"})
    await revisions.activate(P, FAMILY, CONTRACT, r1.revision_id)
    again = await revisions.activate(P, FAMILY, CONTRACT, r1.revision_id)
    assert not again.changed and again.event_id is None
    assert len(await outbox(db)) == 1


@pytest.mark.parametrize("stage", list(Stage))
async def test_a_failed_activation_leaves_neither_pointer_nor_outbox_row(
    db: Database, stage: Stage
) -> None:
    revisions = Revisions(db)
    r1 = await revisions.create(P, FAMILY, CONTRACT, {"model": "a"})
    r2 = await revisions.create(P, FAMILY, CONTRACT, {"model": "b"})
    await revisions.activate(P, FAMILY, CONTRACT, r1.revision_id)
    events_before = await stream(db)
    outbox_before = await outbox(db)
    seen: list[Stage] = []

    async def fault(at: Stage, conn: Connection) -> None:
        seen.append(at)
        if at is Stage.POINTER_UPDATED:  # the pointer really moved inside the transaction
            assert (
                await conn.fetchval(
                    "SELECT active_revision_id FROM awooop_active_revisions WHERE contract_id = $1",
                    CONTRACT,
                )
                == r2.revision_id
            )
        if at is stage:
            raise InjectedFault(at)

    with pytest.raises(InjectedFault):
        await revisions.activate(P, FAMILY, CONTRACT, r2.revision_id, fault=fault)
    assert seen[-1] is stage
    assert await pointer(db) == r1.revision_id
    assert await outbox(db) == outbox_before
    assert await stream(db) == events_before


async def test_unknown_revision_is_404_and_the_pointer_stays(db: Database) -> None:
    revisions = Revisions(db)
    r1 = await revisions.create(P, FAMILY, CONTRACT, {"model": "a"})
    await revisions.activate(P, FAMILY, CONTRACT, r1.revision_id)
    with pytest.raises(RevisionNotFoundError) as info:
        await revisions.activate(P, FAMILY, CONTRACT, uuid.uuid4())
    assert (info.value.code, info.value.http_status) == ("E-REVISION-001", 404)
    assert await pointer(db) == r1.revision_id
    assert len(await outbox(db)) == 1


async def test_another_projects_revision_is_not_found_and_the_pointer_stays(
    db: Database,
) -> None:
    revisions = Revisions(db)
    mine = await revisions.create(P, FAMILY, CONTRACT, {"model": "a"})
    theirs = await revisions.create("p2", FAMILY, CONTRACT, {"model": "evil"})
    await revisions.activate(P, FAMILY, CONTRACT, mine.revision_id)
    with pytest.raises(RevisionNotFoundError):
        await revisions.activate(P, FAMILY, CONTRACT, theirs.revision_id)
    with pytest.raises(RevisionNotFoundError):  # and it cannot even be read
        await revisions.get(P, theirs.revision_id)
    assert await pointer(db) == mine.revision_id
    assert await pointer(db, project="p2") is None


async def test_a_revision_of_another_contract_is_refused(db: Database) -> None:
    revisions = Revisions(db)
    other = await revisions.create(P, FAMILY, "other", {"model": "x"})
    with pytest.raises(RevisionContractMismatchError) as info:
        await revisions.activate(P, FAMILY, CONTRACT, other.revision_id)
    assert info.value.http_status == 422
    assert await pointer(db) is None
    assert await outbox(db) == []


async def test_a_stale_expected_revision_is_409_and_the_pointer_stays(db: Database) -> None:
    revisions = Revisions(db)
    r1, r2, r3 = [await revisions.create(P, FAMILY, CONTRACT, {"n": n}) for n in range(3)]
    await revisions.activate(P, FAMILY, CONTRACT, r1.revision_id)
    await revisions.activate(P, FAMILY, CONTRACT, r2.revision_id)
    with pytest.raises(RevisionConflictError) as info:
        await revisions.activate(P, FAMILY, CONTRACT, r3.revision_id, expected=r1.revision_id)
    assert (info.value.code, info.value.http_status) == ("E-REVISION-002", 409)
    with pytest.raises(RevisionConflictError):  # "expected none" while one is active
        await revisions.activate(P, FAMILY, CONTRACT, r3.revision_id, expected=None)
    assert await pointer(db) == r2.revision_id
    assert len(await outbox(db)) == 2


@pytest.mark.connections(11)
async def test_concurrent_activations_from_the_same_expected_revision_one_wins(
    db: Database,
) -> None:
    revisions = Revisions(db)
    base = await revisions.create(P, FAMILY, CONTRACT, {"n": "base"})
    await revisions.activate(P, FAMILY, CONTRACT, base.revision_id)
    candidates = [await revisions.create(P, FAMILY, CONTRACT, {"n": n}) for n in range(8)]
    results = await asyncio.gather(
        *(
            revisions.activate(P, FAMILY, CONTRACT, c.revision_id, expected=base.revision_id)
            for c in candidates
        ),
        return_exceptions=True,
    )
    winners = [r for r in results if not isinstance(r, BaseException)]
    losers = [r for r in results if isinstance(r, BaseException)]
    assert len(winners) == 1
    assert all(isinstance(e, RevisionConflictError) for e in losers)
    assert await pointer(db) == winners[0].new_revision_id
    assert len(await outbox(db)) == 2


@pytest.mark.connections(9)
async def test_concurrent_first_activations_without_expectation_all_apply_in_order(
    db: Database,
) -> None:
    revisions = Revisions(db)
    candidates = [await revisions.create(P, FAMILY, CONTRACT, {"n": n}) for n in range(6)]
    results = await asyncio.gather(
        *(revisions.activate(P, FAMILY, CONTRACT, c.revision_id) for c in candidates)
    )
    rows = await outbox(db)
    assert len(rows) == 6
    # The outbox chain is unbroken: each activation's old revision is the previous one's new.
    chain = sorted(rows, key=lambda r: r["created_at"])
    activations = [e for e in await stream(db) if isinstance(e, RevisionActivated)]
    assert activations[0].old_revision_id is None
    for before, after in itertools.pairwise(activations):
        assert after.old_revision_id == before.new_revision_id
    assert await pointer(db) == activations[-1].new_revision_id
    assert {r.new_revision_id for r in results} == {c.revision_id for c in candidates}
    assert len(chain) == len(activations)


async def test_rollback_activates_the_previous_revision(db: Database) -> None:
    revisions = Revisions(db)
    with pytest.raises(NoActiveRevisionError):
        await revisions.rollback(P, FAMILY, CONTRACT)
    r1 = await revisions.create(P, FAMILY, CONTRACT, {"model": "a"})
    r2 = await revisions.create(P, FAMILY, CONTRACT, {"model": "b"})
    await revisions.activate(P, FAMILY, CONTRACT, r1.revision_id)
    with pytest.raises(NothingToRollBackError):
        await revisions.rollback(P, FAMILY, CONTRACT)
    await revisions.activate(P, FAMILY, CONTRACT, r2.revision_id)
    back = await revisions.rollback(P, FAMILY, CONTRACT)
    assert (back.old_revision_id, back.new_revision_id) == (r2.revision_id, r1.revision_id)
    assert await pointer(db) == r1.revision_id
    rows = await outbox(db)
    assert (rows[-1]["old_revision_id"], rows[-1]["new_revision_id"]) == (
        r2.revision_id,
        r1.revision_id,
    )
    explicit = await revisions.rollback(P, FAMILY, CONTRACT, to_revision_id=r2.revision_id)
    assert explicit.new_revision_id == r2.revision_id
    with pytest.raises(RevisionConflictError):
        await revisions.rollback(P, FAMILY, CONTRACT, expected=r1.revision_id)


async def test_listing_and_showing(db: Database) -> None:
    revisions = Revisions(db)
    r1 = await revisions.create(P, FAMILY, CONTRACT, {"model": "a"})
    r2 = await revisions.create(P, "channel_event", "telegram", {"route": "x"})
    await revisions.create("p2", FAMILY, CONTRACT, {"model": "z"})
    await revisions.activate(P, FAMILY, CONTRACT, r1.revision_id)
    listed = await revisions.revisions(P)
    assert [(r.revision_id, r.active) for r in listed] == [
        (r2.revision_id, False),
        (r1.revision_id, True),
    ]
    contracts = await revisions.contracts(P)
    assert [(c.contract_family, c.active_revision_id, c.revisions) for c in contracts] == [
        ("channel_event", None, 1),
        (FAMILY, r1.revision_id, 1),
    ]
    active = await revisions.active(P, FAMILY, CONTRACT)
    assert (active.revision_id, active.body) == (r1.revision_id, {"model": "a"})
    with pytest.raises(NoActiveRevisionError):
        await revisions.active(P, "channel_event", "telegram")


async def test_a_malformed_retry_section_is_refused_on_create_and_on_activation(
    db: Database,
) -> None:
    """An agent contract's retry section (awooop/revisions/retry_section.py) is checked when
    the revision is created and again when it is activated (one stored before the rule
    existed): E-REVISION-006 naming the path, and nothing written either time."""
    revisions = Revisions(db)
    bad = {"retry": {"steps": {"fetch": {"max_attempts": 0}}}}
    with pytest.raises(InvalidContractBodyError) as created:
        await revisions.create(P, "agent", CONTRACT, bad)
    assert created.value.code == "E-REVISION-006"
    assert created.value.details["path"] == "retry.steps.fetch"
    assert "agent: retry.steps.fetch: max_attempts must be at least 1" in created.value.message
    assert await revisions.revisions(P) == []

    async with db.tenant(P) as conn:  # stored as an earlier release could store it
        stored = await conn.fetchval(
            "INSERT INTO awooop_contract_revisions "
            "(project_id, contract_family, contract_id, body, body_hash) "
            "VALUES ($1, 'agent', $2, $3, $4) RETURNING revision_id",
            P,
            CONTRACT,
            {"retry": {"tools": {"search": {"timeout_s": "10"}}}},
            "sha256:stored-earlier",
        )
    outbox_before = await outbox(db)
    with pytest.raises(InvalidContractBodyError) as activated:
        await revisions.activate(P, "agent", CONTRACT, stored)
    assert activated.value.details["path"] == "retry.tools.search.timeout_s"
    async with db.platform() as conn:
        assert await conn.fetchval("SELECT count(*) FROM awooop_active_revisions") == 0
        events = await conn.fetchval(
            "SELECT count(*) FROM awooop_events WHERE stream_id = $1",
            revision_stream_id(P, "agent", CONTRACT),
        )
    assert events == 0
    assert await outbox(db) == outbox_before == []
