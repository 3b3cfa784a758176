"""Large run tables for the read benchmarks (``console.py``, ``tenant_reads.py``) and the plan
test (``tests/integration/test_tenant_read_plans.py``): run rows and their events written as CSV
and copied in, then analysed; and ``EXPLAIN`` of a statement. Rows are written straight into the
tables, as the runtime's writers would have left them, so a million runs take seconds."""

from __future__ import annotations

import csv
import io
import random
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

# The mix of a busy project's runs (weights): mostly finished, a few of each live state.
STATUSES = (
    ("COMPLETED", 0.90),
    ("FAILED", 0.05),
    ("PENDING", 0.02),
    ("RUNNING", 0.02),
    ("WAITING_APPROVAL", 0.005),
    ("CANCELLED", 0.005),
)
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


def pick_status(rnd: random.Random) -> str:
    return rnd.choices([s for s, _ in STATUSES], [w for _, w in STATUSES])[0]


def run_fields(
    run_id: uuid.UUID,
    project: str,
    key: str,
    status: str,
    *,
    version: int,
    created: datetime,
    now: datetime,
) -> list[Any]:
    """One run row in :data:`RUN_COLUMNS` order, as its writers leave a run in ``status``."""
    running, failed = status == "RUNNING", status == "FAILED"
    updated = created + timedelta(seconds=2)
    return [
        run_id,
        project,
        "api",
        key,
        status,
        version,
        0 if status == "PENDING" else 1,
        3,
        "bench-host:1:w1" if running else "",
        (now + timedelta(minutes=5)).isoformat() if running else "",
        "the handler raised" if failed else "",
        "E-HANDLER-001" if failed else "",
        "{}",
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
