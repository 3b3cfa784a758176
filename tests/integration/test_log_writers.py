"""The log room's contract: every writer of ``awooop_events``, ``awooop_event_streams`` and
``awooop_run_state`` (the table in ``awooop/eventlog/writers.py``) leaves each run row equal to
``apply`` folded over the run's events, and each stream head equal to its last event.

One case per writer runs it against real Postgres, with asyncpg's query logger on the
connections it writes through, and the test checks that the statements the case names were
sent. The checks below the cases fail when a writer of the table has no case, when a
``sql/*.sql`` file writes a log table without a row in the table, or when a module outside
``awooop/eventlog/`` writes a log table.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import pytest

from awooop.core.config import Settings
from awooop.core.db import Connection, Database
from awooop.core.events import StepCompleted, decode_event, run_stream_id
from awooop.eventlog import batches, eventlog, queries
from awooop.eventlog import runs as log_runs
from awooop.eventlog.eventlog import RawEvent
from awooop.eventlog.state import LEASED, RunState, fold
from awooop.eventlog.writers import BY_NAME, EVENTS, RUNS, STREAMS
from awooop.ingest import ingest_write as ingest_store
from awooop.ingest.common import ParsedEvent
from awooop.projections.registry import get
from awooop.projections.replay import Replay
from awooop.runs import leases, run_rows, timers
from tests.support.factories import created, event_for
from tests.support.runs import create_runs

T = TypeVar("T")
P = "proj-writers"
ROOT = Path(__file__).resolve().parents[2]
LOG_TABLES = (EVENTS, STREAMS, RUNS)
# A statement that writes one of the log tables (names end at a word boundary: no _view).
WRITES = re.compile(
    r"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+(awooop_events|awooop_event_streams|"
    r"awooop_run_state)\b",
    re.IGNORECASE,
)


@dataclass
class Touched:
    """What a case wrote: its runs and any other streams; ``clock_ahead``: the lease clock of
    leased runs may be ahead of the log (renew_leases writes it without an event)."""

    runs: set[uuid.UUID] = field(default_factory=set)
    streams: set[str] = field(default_factory=set)
    clock_ahead: bool = False


Case = Callable[[Database, str, Settings], Awaitable[Touched]]
CASES: dict[str, tuple[tuple[str, ...], Case]] = {}
SENT: list[str] = []  # the statements the current case sent through logged connections


def _sent(record: Any) -> None:
    SENT.append(record.query)


def logged(fn: Callable[[Connection], Awaitable[T]]) -> Callable[[Connection], Awaitable[T]]:
    """``fn``, with the statements it sends on its connection recorded in SENT."""

    async def run(conn: Connection) -> T:
        with conn.query_logger(_sent):
            return await fn(conn)

    return run


def case(*writers: str) -> Callable[[Case], Case]:
    """Register a case that runs ``writers`` (names of awooop.eventlog.writers.WRITERS)."""

    def register(run: Case) -> Case:
        CASES[run.__name__] = (writers, run)
        return run

    return register


# --- the cases ------------------------------------------------------------------------------


@case("insert_run", "append")
async def create_run(db: Database, url: str, settings: Settings) -> Touched:
    runs = await create_runs(db, P, 1)  # the helper every test uses to make runs
    async with db.tenant(P) as conn:
        now = await conn.fetchval("SELECT now()")
        made = await logged(lambda c: log_runs.create_run(c, created(at=now, project_id=P)))(conn)
    return Touched({*runs, made.run_id})


@case("update_run", "append")
async def apply_and_store(db: Database, url: str, settings: Settings) -> Touched:
    runs = await create_runs(db, P, 2)
    paths = (
        ["RunClaimed", "StepCompleted", "ToolWaitStarted", "ToolResultReceived", "RunCompleted"],
        ["RunClaimed", "ApprovalRequested", "ApprovalGranted", "RunClaimed", "RunFailed"],
    )
    for run_id, path in zip(runs, paths, strict=True):
        for name in path:
            await _record(db, run_id, name)
    return Touched(set(runs))


async def _record(db: Database, run_id: uuid.UUID, name: str) -> None:
    def make(state: RunState, now: datetime) -> Any:
        return event_for(name, state, at=now)

    async with db.tenant(P) as conn:
        await logged(lambda c: run_rows.record(c, run_id, make))(conn)


@case("update_run", "append_many")
async def apply_and_store_many(db: Database, url: str, settings: Settings) -> Touched:
    runs = await create_runs(db, P, 3)
    claimed = await db.in_platform_writes(logged(lambda c: leases.poll(c, "w1", 30, 10, 0.0)))
    assert {s.run_id for s in claimed} == set(runs)
    return Touched(set(runs))


@case("update_run", "append_runs")
async def fenced_record_many_of_several_events(
    db: Database, url: str, settings: Settings
) -> Touched:
    """Two runs take two events each in one fenced write (a model call and its step), a third
    one event, in one group commit."""
    runs = await create_runs(db, P, 3)
    claimed = await db.in_platform_writes(lambda c: leases.poll(c, "w1", 30, 10, 0.0))
    assert {s.run_id for s in claimed} == set(runs)

    def steps(run_id: uuid.UUID, names: tuple[str, ...]) -> leases.FencedWrite:
        def make(state: RunState, now: datetime) -> Any:
            made = tuple(
                StepCompleted(at=now, worker_id="w1", attempt=1, step=n, result=n) for n in names
            )
            return made if len(made) > 1 else made[0]

        return leases.FencedWrite(run_id, "w1", 1, make)

    writes = [steps(runs[0], ("a", "b")), steps(runs[1], ("c",)), steps(runs[2], ("d", "e"))]
    done = await db.in_platform_writes(logged(lambda c: leases.fenced_record_many(c, writes)))
    assert [sorted(s.saga_steps) for s in done if isinstance(s, RunState)] == [
        ["a", "b"],
        ["c"],
        ["d", "e"],
    ]
    return Touched(set(runs))


@case("claim_many")
async def claim_many(db: Database, url: str, settings: Settings) -> Touched:
    runs = await create_runs(db, P, 3)
    batch = await db.in_run_statement(
        logged(lambda c: leases.claim_many(c, runs, "w1", 30, {"k": 1}))
    )
    assert set(batch.claimed) == set(runs)
    return Touched(set(runs))


@case("claim_many", "complete_many")
async def complete_many(db: Database, url: str, settings: Settings) -> Touched:
    runs = await create_runs(db, P, 3)
    await db.in_run_statement(logged(lambda c: leases.claim_many(c, runs, "w1", 30)))
    results: list[object] = [{"a": [1, 2.5]}, None, "done"]
    completions = [
        leases.Completion(r, "w1", 1, result) for r, result in zip(runs, results, strict=True)
    ]
    written = await db.in_run_statement(logged(lambda c: leases.complete_many(c, completions)))
    assert written == [None] * 3  # written (the fold of the events is checked by the caller)
    return Touched(set(runs))


@case("claim_many", "sleep_many")
async def sleep_many(db: Database, url: str, settings: Settings) -> Touched:
    runs = await create_runs(db, P, 2)
    await db.in_run_statement(logged(lambda c: leases.claim_many(c, runs, "w1", 30)))
    sleeps = [
        leases.Sleep(runs[0], "w1", 1, step="sleep:1", delay=timedelta(seconds=30)),
        leases.Sleep(runs[1], "w1", 1, step="nap", until=datetime(2031, 1, 2, tzinfo=UTC)),
    ]
    written = await db.in_run_statement(logged(lambda c: leases.sleep_many(c, sleeps)))
    assert [getattr(w, "status", None) for w in written] == ["WAITING_EVENT"] * 2
    return Touched(set(runs))


@case("claim_many", "journal_many")
async def journal_many(db: Database, url: str, settings: Settings) -> Touched:
    runs = await create_runs(db, P, 2)
    await db.in_run_statement(logged(lambda c: leases.claim_many(c, runs, "w1", 30)))
    journals = [
        leases.Journal(
            r,
            "w1",
            1,
            events=(
                StepCompleted(
                    at=leases.JOURNAL_CLOCK, worker_id="w1", attempt=1, step=f"s{n}", result=n
                ),
            ),
        )
        for n, r in enumerate(runs)
    ]
    written = await db.in_run_statement(logged(lambda c: leases.journal_many(c, journals)))
    assert written == dict.fromkeys(runs)  # written (the fold is checked by the caller)
    return Touched(set(runs))


@case("claim_many", "sleep_many", "fire_many")
async def fire_many(db: Database, url: str, settings: Settings) -> Touched:
    runs = await create_runs(db, P, 2)
    await db.in_run_statement(logged(lambda c: leases.claim_many(c, runs, "w1", 30)))
    sleeps = [leases.Sleep(r, "w1", 1, step="sleep:1", delay=timedelta(0)) for r in runs]
    await db.in_run_statement(logged(lambda c: leases.sleep_many(c, sleeps)))
    fired = await db.in_platform_writes(logged(lambda c: timers.fire_due(c, 10)))
    assert sorted(s.run_id for s, _ in fired) == sorted(runs)
    return Touched(set(runs))


@case("claim_many", "sleep_many", "fire_claim")
async def fire_claim(db: Database, url: str, settings: Settings) -> Touched:
    runs = await create_runs(db, P, 2)
    await db.in_run_statement(logged(lambda c: leases.claim_many(c, runs, "w1", 30)))
    sleeps = [leases.Sleep(r, "w1", 1, step="sleep:1", delay=timedelta(0)) for r in runs]
    slept = await db.in_run_statement(logged(lambda c: leases.sleep_many(c, sleeps)))
    held = [(s.run_id, s.version) for s in slept if isinstance(s, RunState)]
    fired = await db.in_run_statement(logged(lambda c: batches.fire_claim(c, held, "w2", 30)))
    assert sorted((s.run_id, claimed) for s, claimed in fired) == sorted((r, True) for r in runs)
    return Touched(set(runs))


@case("claim_many", "renew_leases")
async def renew_leases(db: Database, url: str, settings: Settings) -> Touched:
    runs = await create_runs(db, P, 2)
    await db.in_run_statement(logged(lambda c: leases.claim_many(c, runs, "w1", 30)))
    renewed = await db.in_run_statement(
        logged(lambda c: leases.heartbeat(c, "w1", dict.fromkeys(runs, 1), 90))
    )
    assert renewed == set(runs)
    return Touched(set(runs), clock_ahead=True)


@case("ingest_new")
async def ingest_new(db: Database, url: str, settings: Settings) -> Touched:
    events = [ParsedEvent(f"k{i}", {"i": i}) for i in range(3)] + [ParsedEvent("k0", {})]
    async with db.tenant(P) as conn:
        config = await ingest_store.load_config(conn, settings, P, "api")
        outcomes = await logged(lambda c: ingest_store.ingest(c, P, "api", events, config=config))(
            conn
        )
    assert [o.created for o in outcomes] == [True, True, True, False]
    return Touched({o.run_id for o in outcomes})


@case("append_at_head")
async def append_at_head(db: Database, url: str, settings: Settings) -> Touched:
    stream = f"domain/{P}/order-{uuid.uuid4()}"
    for n in range(2):
        events = [RawEvent("OrderPlaced", f'{{"n": {n}}}')] * 2
        async with db.tenant(P) as conn:
            await eventlog.lock_heads(conn, [stream])
            await logged(_append_at_head(stream, events))(conn)
    return Touched(streams={stream})


def _append_at_head(
    stream: str, events: list[RawEvent]
) -> Callable[[Connection], Awaitable[list[eventlog.Appended]]]:
    return lambda c: eventlog.append_at_head(c, stream, P, events)


@case("replay_repair")
async def replay_repair(db: Database, url: str, settings: Settings) -> Touched:
    runs = await create_runs(db, P, 2)
    async with db.tenant(P) as conn:
        await run_rows.record(conn, runs[0], lambda s, now: event_for("RunClaimed", s, at=now))
    async with db.platform_writes() as conn:  # a row that no longer equals its fold
        await conn.execute(
            "UPDATE awooop_run_state SET attempt_count = attempt_count + 7 WHERE run_id = $1",
            runs[1],
        )
    report = await Replay(url, get("run_state"), project=P).run(swap=True)
    assert report.repaired_rows == 1
    return Touched(set(runs))


# --- the contract ---------------------------------------------------------------------------


async def assert_log_equals_fold(db: Database, touched: Touched) -> None:
    async with db.platform_writes() as conn:
        for run_id in touched.runs:
            row = await run_rows.load(conn, run_id)
            recorded = await eventlog.read_stream(conn, run_stream_id(run_id))
            folded = fold([decode_event(e.data) for e in recorded])
            assert row is not None and folded is not None
            if touched.clock_ahead and row.status in LEASED:
                assert row.lease_until is not None and folded.lease_until is not None
                assert row.heartbeat_at is not None and folded.heartbeat_at is not None
                assert row.lease_until > folded.lease_until  # renewed: ahead, never behind
                assert row.heartbeat_at >= folded.heartbeat_at
                row = msgspec.structs.replace(
                    row, lease_until=folded.lease_until, heartbeat_at=folded.heartbeat_at
                )
            assert row == folded
        for stream_id in touched.streams | {run_stream_id(r) for r in touched.runs}:
            head = await conn.fetchval(
                "SELECT version FROM awooop_event_streams WHERE stream_id = $1", stream_id
            )
            versions = [e.version for e in await eventlog.read_stream(conn, stream_id)]
            assert head is not None and versions == list(range(1, head + 1)), stream_id


@pytest.mark.parametrize("name", sorted(CASES))
async def test_the_writer_leaves_every_row_equal_to_the_fold_of_its_events(
    db: Database, database_url: str, settings: Settings, name: str
) -> None:
    writers, run = CASES[name]
    SENT.clear()
    touched = await run(db, database_url, settings)
    await asyncio.sleep(0.05)  # asyncpg calls query loggers soon after, not during, a query
    for writer in writers:
        if not BY_NAME[writer].source:
            assert queries.load(writer) in SENT, f"the case sent no {writer}.sql"
    assert touched.runs or touched.streams
    await assert_log_equals_fold(db, touched)


def test_every_writer_of_the_table_has_a_case() -> None:
    covered = {w for writers, _run in CASES.values() for w in writers}
    assert covered - set(BY_NAME) == set(), "cases name writers the table does not have"
    assert set(BY_NAME) - covered == set(), "writers without a case in this file"


def test_every_sql_file_that_writes_the_log_is_in_the_table() -> None:
    writing = {name for name, text in queries.QUERIES.items() if WRITES.search(text)}
    assert writing - set(BY_NAME) == set()
    in_files = {w.name for w in BY_NAME.values() if not w.source}
    assert in_files <= set(queries.QUERIES), "table rows without their sql/<name>.sql"
    for name in writing:
        written = {m.lower() for m in WRITES.findall(queries.load(name))}
        assert written <= set(BY_NAME[name].tables), name


def test_no_module_outside_the_log_room_writes_the_log() -> None:
    found = []
    for package in ("awooop", "streams", "projections"):
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative.startswith("awooop/eventlog/"):
                continue
            for match in WRITES.finditer(path.read_text(encoding="utf-8")):
                found.append(f"{relative}: {match.group(0)}")
    assert found == []
