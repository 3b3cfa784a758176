"""The write path keeps awooop_run_state equal to apply() folded over the run's events."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from awooop.core.db import Database
from awooop.core.errors import IllegalTransitionError
from awooop.core.events import RunCompleted, decode_event, run_stream_id
from awooop.eventlog import eventlog
from awooop.eventlog.runs import create_run
from awooop.eventlog.state import TERMINAL, TRANSITIONS, RunState, apply, fold
from awooop.runs import run_rows
from tests.support.factories import created, event_for
from tests.support.properties import ON_DATABASE

PROJECT = "p1"


@st.composite
def legal_histories(draw: st.DrawFn) -> list[str]:
    """A random walk through the state machine, as a list of event type names."""
    names = ["RunCreated"]
    state: RunState | None = apply(None, created())
    for _ in range(draw(st.integers(0, 12))):
        assert state is not None
        options = sorted(TRANSITIONS[state.status])
        if not options:
            break
        name = draw(st.sampled_from(options))
        names.append(name)
        state = apply(state, event_for(name, state))
    return names


@settings(ON_DATABASE, max_examples=60)
@given(history=legal_histories())
async def test_the_row_equals_apply_folded_over_the_events(
    db: Database, history: list[str]
) -> None:
    run_id = uuid.uuid4()
    first = created(run_id=run_id, project_id=PROJECT)
    async with db.tenant(PROJECT) as conn:
        await create_run(conn, first)
    for name in history[1:]:
        async with db.tenant(PROJECT) as conn:
            await run_rows.record(conn, run_id, lambda s, now, name=name: event_for(name, s))
    async with db.tenant(PROJECT) as conn:
        row = await run_rows.load(conn, run_id)
        recorded = await eventlog.read_stream(conn, run_stream_id(run_id))
    assert [e.event_type for e in recorded] == history
    assert row == fold([decode_event(e.data) for e in recorded])


async def test_an_illegal_event_writes_nothing(db: Database) -> None:
    run_id = uuid.uuid4()
    async with db.tenant(PROJECT) as conn:
        await create_run(conn, created(run_id=run_id, project_id=PROJECT))
    with pytest.raises(IllegalTransitionError):
        async with db.tenant(PROJECT) as conn:
            await run_rows.record(
                conn, run_id, lambda s, now: RunCompleted(at=now, worker_id="w", attempt=0)
            )
    async with db.tenant(PROJECT) as conn:
        row = await run_rows.load(conn, run_id)
        recorded = await eventlog.read_stream(conn, run_stream_id(run_id))
    assert row is not None and row.status == "PENDING" and row.version == 1
    assert len(recorded) == 1
    assert row.status not in TERMINAL
