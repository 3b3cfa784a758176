"""Failure isolation in the worker's group commits, on real Postgres with an in-process worker:
10 runs whose step results (or return values) are written in ONE batch, one of them holding
text with \\u0000 that Postgres jsonb cannot store. The 9 clean runs COMPLETE, the bad one
FAILS with E-DATA-001 and a reason naming the value, and no handler runs twice. Both with the
pure check before the statement (the usual path) and without it (the value reaches Postgres,
which refuses the statement; the batcher then writes each item alone)."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from typing import Any

import msgspec
import pytest

from awooop.core import storable
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.worker.context import RunContext
from awooop.worker.outcomes import Outcome
from awooop.worker.runtime import Worker
from tests.support.runs import create_runs, load

P = "proj-iso"
RUNS = 10
BAD_TEXT = "bad\x00value"


class Gate:
    """Holds every handler at one point until all ``parties`` are there, then lets them all go
    in the same turn of the event loop. What follows (a step's write, or the return and the
    completion's write) is the same code for each, so all of their writes are queued before
    the batcher's flush runs: one batch of ``parties``. The tests check that it was."""

    def __init__(self, parties: int) -> None:
        self.parties = parties
        self.arrived = 0
        self.open = asyncio.Event()

    async def wait(self) -> None:
        self.arrived += 1
        if self.arrived == self.parties:
            self.open.set()
            await asyncio.sleep(0)  # resume in the same turn as the others
        else:
            await self.open.wait()


@pytest.fixture
def quick(settings: Settings) -> Settings:
    return msgspec.structs.replace(
        settings,
        lease_ttl_s=10.0,
        heartbeat_interval_s=0.5,
        poll_interval_s=0.2,
        shutdown_grace_s=1.0,
    )


@pytest.fixture(params=[True, False], ids=["checked-before", "refused-by-postgres"])
def precheck(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Without the pure check, the bad value reaches Postgres, which refuses the statement of
    the whole batch: what only Postgres detects must be isolated too."""
    if not request.param:
        monkeypatch.setattr(storable, "encoded_problem", lambda _value, _where="value": None)
    return bool(request.param)


async def make_runs(db: Database) -> tuple[list[uuid.UUID], uuid.UUID]:
    clean = await create_runs(db, P, RUNS - 1, payload={"poison": False})
    [bad] = await create_runs(db, P, payload={"poison": True})
    return clean, bad


def worker(db: Database, settings: Settings, handler: Any) -> Worker:
    return Worker(db=db, settings=settings, handler=handler, concurrency=RUNS)


@pytest.mark.connections(17)
async def test_a_step_result_postgres_cannot_store_fails_only_its_run(
    db: Database, quick: Settings, precheck: bool
) -> None:
    clean, bad = await make_runs(db)
    gate = Gate(RUNS)
    calls: Counter[uuid.UUID] = Counter()
    seen_by_handler: dict[uuid.UUID, str] = {}

    async def handler(run: RunContext) -> dict[str, Any]:
        calls[run.run_id] += 1

        async def fetch() -> dict[str, str]:
            await gate.wait()
            return {"body": BAD_TEXT if run.input["poison"] else f"clean {run.run_id}"}

        try:
            fetched = await run.step("fetch", fetch)
        except Exception as exc:
            seen_by_handler[run.run_id] = getattr(exc, "code", type(exc).__name__)
            raise
        return {"fetched": fetched["body"]}

    w = worker(db, quick, handler)
    assert await w.run_until_idle(max_s=60) == RUNS
    # The 10 step writes went in one flush; the bad run's RunFailed in a second one.
    assert (w.executor.writes.flushes, w.executor.writes.items) == (2, RUNS + 1)
    assert w.executor.writes.isolated == (0 if precheck else 1)

    for run_id in clean:
        state = await load(db, P, run_id)
        assert state.status == "COMPLETED", (state.status, state.failure_reason)
        assert state.result == {"fetched": f"clean {run_id}"}
    state = await load(db, P, bad)
    assert state.status == "FAILED"
    assert state.failure_code == "E-DATA-001"
    assert state.failure_reason is not None
    assert state.failure_reason.startswith(
        "UnstorableValueError: step 'fetch' result could not be stored: "
    )
    assert "\\u0000" in state.failure_reason and "\x00" not in state.failure_reason
    if precheck:  # the pure check names the field and shows the value (escaped)
        assert "StepCompleted['result']['body']: text 'bad\\x00value'" in state.failure_reason
    else:  # Postgres's own words
        assert "UntranslatableCharacterError" in state.failure_reason
    assert "fetch" not in state.saga_steps  # nothing of the bad step was recorded
    assert seen_by_handler == {bad: "E-DATA-001"}  # the handler saw the coded error
    assert calls == dict.fromkeys([*clean, bad], 1)  # no handler ran twice
    assert w.executor.finished[Outcome.COMPLETED] == RUNS - 1
    assert w.executor.finished[Outcome.FAILED] == 1
    assert w.executor.finished[Outcome.ERROR] == 0


@pytest.mark.connections(20)
async def test_a_return_value_postgres_cannot_store_fails_only_its_run(
    db: Database, quick: Settings, precheck: bool
) -> None:
    clean, bad = await make_runs(db)
    gate = Gate(RUNS)
    calls: Counter[uuid.UUID] = Counter()

    async def handler(run: RunContext) -> dict[str, Any]:
        calls[run.run_id] += 1
        await run.step("fetch", lambda: asyncio.sleep(0, result=1))
        await gate.wait()
        return {"body": BAD_TEXT if run.input["poison"] else f"clean {run.run_id}"}

    w = worker(db, quick, handler)
    assert await w.run_until_idle(max_s=60) == RUNS
    # All 10 completions were one flush.
    assert (w.executor.completions.flushes, w.executor.completions.items) == (1, RUNS)
    assert w.executor.completions.isolated == (0 if precheck else 1)

    for run_id in clean:
        state = await load(db, P, run_id)
        assert state.status == "COMPLETED", (state.status, state.failure_reason)
        assert state.result == {"body": f"clean {run_id}"}
    state = await load(db, P, bad)
    assert state.status == "FAILED"
    assert state.failure_code == "E-DATA-001"
    assert state.failure_reason is not None
    assert state.failure_reason.startswith(
        "UnstorableValueError: the return value could not be stored: "
    )
    assert "\\u0000" in state.failure_reason and "\x00" not in state.failure_reason
    if precheck:
        assert "result['body']: text 'bad\\x00value'" in state.failure_reason
    else:
        assert "UntranslatableCharacterError" in state.failure_reason
    assert state.result is None and state.attempt_count == 1
    assert calls == dict.fromkeys([*clean, bad], 1)  # no handler ran twice
    assert w.executor.finished[Outcome.COMPLETED] == RUNS - 1
    assert w.executor.finished[Outcome.FAILED] == 1
    assert w.executor.finished[Outcome.ERROR] == 0


async def test_a_handler_error_whose_message_holds_nul_fails_the_run_with_that_reason(
    db: Database, quick: Settings
) -> None:
    """The RunFailed's own reason must be storable: a message with NUL is escaped, not a
    write Postgres refuses (which would leave the run to be retried as if the database were
    away)."""
    [run_id] = await create_runs(db, P, payload={})
    calls: Counter[uuid.UUID] = Counter()

    async def handler(run: RunContext) -> None:
        calls[run.run_id] += 1
        raise ValueError(f"cannot parse {BAD_TEXT!s}")

    w = worker(db, quick, handler)
    assert await w.run_until_idle(max_s=60) == 1
    state = await load(db, P, run_id)
    assert (state.status, state.failure_code) == ("FAILED", "E-HANDLER-001")
    assert state.failure_reason == "ValueError: cannot parse bad\\u0000value"
    assert calls == {run_id: 1}
