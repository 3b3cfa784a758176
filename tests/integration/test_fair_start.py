"""awooop_fair_start, the start tag intake gives a project's next run, on real Postgres: on
generated states of the waiting runs (projects, statuses, tags, arrival order, more or fewer
than the 64 the virtual time reads) and of the pauses and weights, it answers what 0134's
definition answers (migrations/0159_fair_start_own_tail.sql reads the head of the fair order
only when the answer needs it)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.properties import ON_DATABASE

PROJECTS = ("pa", "pb", "pc")
ASKED = (*PROJECTS, "pd")  # pd: a project with no runs and no row of its own

# 0134's definition as one statement: the larger of the virtual time (the smallest tag among
# the first 64 waiting runs of projects not paused, or the largest of them when all are
# paused) and the project's last waiting tag + its step (1 / its weight).
DEFINITION_0134 = """
WITH weight AS (
    SELECT (1.0 / coalesce(
        (SELECT share_weight FROM awooop_projects WHERE project_id = $1), 1))::float8 AS step
), head AS (
    SELECT coalesce(min(w.fair_tag) FILTER (WHERE NOT w.paused), max(w.fair_tag)) AS tag
    FROM (
        SELECT r.fair_tag,
               EXISTS (SELECT 1 FROM awooop_flow_pauses AS p
                       WHERE p.project_id = r.project_id AND p.scope = 'project'
                         AND p.resumed_at IS NULL) AS paused
        FROM awooop_run_state AS r
        WHERE r.status IN ('PENDING', 'RESUMED') AND r.fair_tag IS NOT NULL
        ORDER BY r.fair_tag, r.created_at
        LIMIT 64
    ) AS w
), last AS (
    SELECT max(r.fair_tag) AS tag FROM awooop_run_state AS r
    WHERE r.status IN ('PENDING', 'RESUMED') AND r.fair_tag IS NOT NULL
      AND r.project_id = $1
)
SELECT greatest(coalesce(head.tag, 0), coalesce(last.tag + weight.step, 0)) AS start,
       weight.step
FROM weight, head, last
"""

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
        await write_state(owner, runs, order, paused, weights)
        for project in ASKED:
            answer = await owner.fetchrow("SELECT * FROM awooop_fair_start($1)", project)
            expected = await owner.fetchrow(DEFINITION_0134, project)
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
