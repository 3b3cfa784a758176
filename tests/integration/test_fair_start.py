"""awooop_fair_start, the start tag intake gives a project's next run, on real Postgres: on
generated states of the waiting runs (projects, statuses, tags, arrival order, more or fewer
than the 64 the virtual time reads) and of the pauses and weights, it answers what 0134's
definition answers (migrations/0159_fair_start_own_tail.sql reads the head of the fair order
only when the answer needs it)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.properties import ON_DATABASE

PROJECTS = ("pa", "pb", "pc")
ASKED = (*PROJECTS, "pd")  # pd: a project with no runs and no row of its own

# 0134's definition, read from its migration and created under another name in this
# session's temporary schema: the reference the new definition must agree with.
MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"
FIRST = "CREATE FUNCTION awooop_fair_start("


def first_definition() -> str:
    text = (MIGRATIONS / "0134_fair_share.sql").read_text()
    start = text.index(FIRST)
    body = text[start : text.index("$$;", start) + 3]
    return body.replace(FIRST, "CREATE FUNCTION pg_temp.fair_start_0134(", 1)


INSERT_RUNS = """
INSERT INTO awooop_run_state (run_id, project_id, channel_type, provider_event_id, status,
                              version, attempt_count, max_attempts, input, created_at,
                              updated_at, fair_tag)
SELECT gen_random_uuid(), r.project, 'api', 'k-' || r.n, r.status, 1, 0, 3, '{}', r.created,
       r.created, r.tag
FROM unnest($1::text[], $2::text[], $3::float8[], $4::timestamptz[], $5::int[])
    AS r(project, status, tag, created, n)
"""

STATUSES = ("PENDING", "RESUMED", "RUNNING", "COMPLETED")
# Few distinct tags, so that runs of several projects share one; halves and quarters are
# exact in binary, so sums compare exactly.
TAGS = st.one_of(st.none(), st.integers(0, 24).map(lambda n: n / 4))
RUN = st.tuples(st.sampled_from(PROJECTS), st.sampled_from(STATUSES), TAGS)


@pytest.fixture
async def owner(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(database_url)
    try:
        yield conn
    finally:
        await conn.close()


async def write_state(
    conn: asyncpg.Connection,
    runs: list[tuple[str, str, float | None]],
    order: list[int],
    paused: set[str],
    weights: dict[str, int],
) -> None:
    """The runs (each arrived at its own time, in ``order``), the active pauses of
    ``paused`` and a resumed one of every other project, and the weights."""
    base = datetime(2026, 1, 1, tzinfo=UTC)
    created = [base + timedelta(milliseconds=order[i]) for i in range(len(runs))]
    await conn.execute(
        INSERT_RUNS,
        [r[0] for r in runs],
        [r[1] for r in runs],
        [r[2] for r in runs],
        created,
        list(range(len(runs))),
    )
    for project in PROJECTS:
        await conn.execute(
            "INSERT INTO awooop_projects (project_id, share_weight) VALUES ($1, $2)"
            " ON CONFLICT (project_id) DO UPDATE SET share_weight = EXCLUDED.share_weight",
            project,
            weights.get(project, 1),
        )
        await conn.execute(
            "INSERT INTO awooop_flow_pauses (project_id, scope, paused_by, resumed_by,"
            " resumed_at) VALUES ($1, 'project', 'test', $2, $3)",
            project,
            None if project in paused else "test",
            None if project in paused else base,
        )


@st.composite
def states(
    draw: Any,
) -> tuple[list[tuple[str, str, float | None]], list[int], set[str], dict[str, int]]:
    runs = draw(st.lists(RUN, max_size=100))
    order = draw(st.permutations(range(len(runs))))
    paused = draw(st.sets(st.sampled_from(PROJECTS)))
    weights = draw(st.dictionaries(st.sampled_from(PROJECTS), st.integers(1, 1000)))
    return runs, list(order), paused, weights


@settings(ON_DATABASE, max_examples=80)
@given(state=states())
async def test_fair_start_answers_what_its_first_definition_answers(
    owner: asyncpg.Connection, state: tuple[Any, ...]
) -> None:
    runs, order, paused, weights = state
    tx = owner.transaction()
    await tx.start()
    try:
        await owner.execute(first_definition())
        await write_state(owner, runs, order, paused, weights)
        for project in ASKED:
            answer = await owner.fetchrow("SELECT * FROM awooop_fair_start($1)", project)
            expected = await owner.fetchrow("SELECT * FROM pg_temp.fair_start_0134($1)", project)
            assert (answer["start"], answer["step"]) == (expected["start"], expected["step"]), (
                project,
                paused,
            )
    finally:
        await tx.rollback()


async def test_each_way_of_answering_on_a_state_worked_out_by_hand(
    owner: asyncpg.Connection,
) -> None:
    """More than 64 runs waiting: a project with runs waiting and not paused is answered from
    its own last tag, a paused one and one without runs from the head of the fair order."""
    tx = owner.transaction()
    await tx.start()
    try:
        runs = [("pa", "PENDING", float(n)) for n in range(5, 75)]
        runs += [("pb", "PENDING", 0.0), ("pc", "PENDING", 80.0)]
        await write_state(owner, runs, list(range(len(runs))), {"pb"}, {"pc": 4})
        start = {
            p: await owner.fetchval("SELECT start FROM awooop_fair_start($1)", p) for p in ASKED
        }
        # pa: its own last tag + 1; pc: its last + 1/4. pb is paused: the head, the smallest
        # tag of an unpaused project among the first 64 (pa's 5), which its own last + 1 is
        # under; pd has no runs: the head.
        assert start == {"pa": 75.0, "pb": 5.0, "pc": 80.25, "pd": 5.0}
    finally:
        await tx.rollback()
