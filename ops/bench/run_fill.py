"""Large run tables for the read benchmarks (``console.py``, ``tenant_reads.py``) and the plan
test (``tests/integration/test_tenant_read_plans.py``): run rows and their events written as CSV
and copied in, then analysed; and ``EXPLAIN`` of a statement. Rows are written straight into the
tables, as the runtime's writers would have left them, so a million runs take seconds.

:func:`fill_project` is the read benchmarks' data: ``runs`` runs of :data:`PROJECT` with their
event streams (statuses as :data:`STATUSES`, channels as :data:`CHANNELS`, created over the past
3 days; each run's RunCreated, RunClaimed and RunCompleted or RunFailed, so about three events a
run), one of them RUNNING with :data:`LONG_RUN_EVENTS` events (real event bodies: its page
decodes them), and 1,000 runs of :data:`OTHER`."""

from __future__ import annotations

import csv
import io
import random
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from awooop.core.events import (
    RunClaimed,
    RunCreated,
    StepCompleted,
    encode_event,
    event_type,
    run_stream_id,
)

# The mix of a busy project's runs (weights): mostly finished, a few of each live state.
STATUSES = (
    ("COMPLETED", 0.90),
    ("FAILED", 0.05),
    ("PENDING", 0.02),
    ("RUNNING", 0.02),
    ("WAITING_APPROVAL", 0.005),
    ("CANCELLED", 0.005),
)
# The channels runs came in by (weights): a rare one makes a channel filter read far.
CHANNELS = (
    ("api", 0.80),
    ("telegram", 0.10),
    ("alertmanager", 0.05),
    ("gitea", 0.04),
    ("line", 0.01),
)
PROJECT = "bench-big"
OTHER = "bench-other"
OTHER_RUNS = 1000
LONG_RUN_EVENTS = 200
RUN_COLUMNS = (
    "run_id",
    "project_id",
    "channel_type",
    "provider_event_id",
    "status",
    "version",
    "attempt_count",
    "max_attempts",
    "worker_id",
    "lease_until",
    "failure_reason",
    "failure_code",
    "input",
    "created_at",
    "updated_at",
    "finished_at",
)
EVENT_COLUMNS = ("event_id", "stream_id", "version", "project_id", "event_type", "data")
FINISHED = ("COMPLETED", "FAILED", "CANCELLED")


def order_input(i: int) -> str:
    """A run's input as a shop's orders have them, for the console's text search: ``order N``
    is rare (N and the ten to hundred orders whose number starts with it), ``customer`` is in
    every run."""
    return f'{{"order": {i}, "customer": "c{i % 2000:04d}", "note": "order {i} for customer"}}'


def pick_status(rnd: random.Random) -> str:
    return rnd.choices([s for s, _ in STATUSES], [w for _, w in STATUSES])[0]


def pick_channel(rnd: random.Random) -> str:
    return rnd.choices([c for c, _ in CHANNELS], [w for _, w in CHANNELS])[0]


def run_fields(
    run_id: uuid.UUID,
    project: str,
    key: str,
    status: str,
    *,
    version: int,
    created: datetime,
    now: datetime,
    channel: str = "api",
    input_json: str = "{}",
) -> list[Any]:
    """One run row in :data:`RUN_COLUMNS` order, as its writers leave a run in ``status``."""
    running, failed = status == "RUNNING", status == "FAILED"
    updated = created + timedelta(seconds=2)
    return [
        run_id,
        project,
        channel,
        key,
        status,
        version,
        0 if status == "PENDING" else 1,
        3,
        "bench-host:1:w1" if running else "",
        (now + timedelta(minutes=5)).isoformat() if running else "",
        "the handler raised" if failed else "",
        "E-HANDLER-001" if failed else "",
        input_json,
        created.isoformat(),
        updated.isoformat(),
        updated.isoformat() if status in FINISHED else "",
    ]


class Tables:
    """CSV for ``awooop_run_state`` and ``awooop_events``, written row by row."""

    def __init__(self) -> None:
        self.runs, self.events = io.StringIO(), io.StringIO()
        self._runs, self._events = csv.writer(self.runs), csv.writer(self.events)

    def run(self, fields: Sequence[Any]) -> None:
        self._runs.writerow(fields)

    def event(self, stream_id: str, version: int, project: str, kind: str, data: str) -> None:
        self._events.writerow([uuid.uuid4(), stream_id, version, project, kind, data])

    async def copy(self, conn: Any) -> None:
        """Copy both in through ``conn`` (the tables' owner), then ANALYZE them."""
        await conn.copy_to_table(
            "awooop_run_state",
            source=io.BytesIO(self.runs.getvalue().encode()),
            columns=RUN_COLUMNS,
            format="csv",
            null="",
        )
        if self.events.tell():
            await conn.copy_to_table(
                "awooop_events",
                source=io.BytesIO(self.events.getvalue().encode()),
                columns=EVENT_COLUMNS,
                format="csv",
            )
        await conn.execute("VACUUM ANALYZE awooop_run_state")
        await conn.execute("VACUUM ANALYZE awooop_events")


async def explain(conn: Any, sql: str, args: Sequence[Any]) -> str:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of ``sql`` with ``args`` on ``conn``'s role."""
    found = await conn.fetch("EXPLAIN (ANALYZE, BUFFERS) " + sql, *args)
    return "\n".join(r[0] for r in found)


def events_of(status: str) -> list[str]:
    claimed = [] if status == "PENDING" else ["RunClaimed"]
    end = {"COMPLETED": ["RunCompleted"], "FAILED": ["RunFailed"]}.get(status, [])
    return ["RunCreated", *claimed, *end]


def long_run_events(
    run_id: uuid.UUID, at: datetime, project: str, count: int
) -> list[tuple[str, str]]:
    """(type, JSON) of a run whose page is read: created, claimed, then steps, ``count``
    events in all."""
    created = RunCreated(
        at=at,
        run_id=run_id,
        project_id=project,
        channel_type="api",
        provider_event_id="key-0",
        input={},
        max_attempts=3,
    )
    claimed = RunClaimed(at=at, worker_id="w1", attempt=1, lease_until=at + timedelta(minutes=5))
    steps = [
        StepCompleted(at=at, worker_id="w1", attempt=1, step=f"s{i}", result=i)
        for i in range(count - 2)
    ]
    return [(event_type(e), encode_event(e).decode()) for e in (created, claimed, *steps)]


def project_tables(runs: int, seed: int = 31) -> tuple[Tables, uuid.UUID]:
    """The runs of :func:`fill_project` and their events, and the run with 200 events."""
    rnd = random.Random(seed)
    now = datetime.now(UTC)
    out = Tables()
    long_run = uuid.UUID(int=rnd.getrandbits(128), version=4)
    for i in range(runs + OTHER_RUNS):
        project = PROJECT if i < runs else OTHER
        run_id = long_run if i == 0 else uuid.UUID(int=rnd.getrandbits(128), version=4)
        status = "RUNNING" if i == 0 else pick_status(rnd)
        created = now - timedelta(seconds=rnd.uniform(0, 3 * 86400))
        if i == 0:
            events = long_run_events(run_id, created, project, LONG_RUN_EVENTS)
        elif i == runs:  # the other project's run its token reads (tenant_reads' contention)
            events = long_run_events(run_id, created, project, 5)
        else:
            events = [(t, "{}") for t in events_of(status)]
        out.run(
            run_fields(
                run_id,
                project,
                f"key-{i}",
                status,
                version=len(events),
                created=created,
                now=now,
                channel=pick_channel(rnd),
                input_json=order_input(i),
            )
        )
        for version, (kind, data) in enumerate(events, 1):
            out.event(run_stream_id(run_id), version, project, kind, data)
    return out, long_run


async def fill_project(url: str, runs: int) -> tuple[float, uuid.UUID, int]:
    """Copy :func:`project_tables` into the database at ``url``: (seconds, the run with 200
    events, events in the log)."""
    conn = await asyncpg.connect(url)
    try:
        started = time.perf_counter()
        written, long_run = project_tables(runs)
        await written.copy(conn)
        events = await conn.fetchval("SELECT count(*) FROM awooop_events")
        return time.perf_counter() - started, long_run, int(events)
    finally:
        await conn.close()
