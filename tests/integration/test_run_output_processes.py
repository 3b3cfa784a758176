"""Streamed run output across a worker's death: ``awooop worker`` processes, one killed with
SIGKILL mid-stream, read by one client through the server ``awooop serve`` runs (uvicorn, in
process). What the dead attempt flushed stays; the retry's output follows it, the dead
attempt's marked abandoned; the client's one stream sees it all, then the end."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.ingest import credentials
from tests.integration.test_run_output import bearer, rows_of, texts
from tests.integration.test_tenant_capacity import serving
from tests.support.output import Event, events
from tests.support.runs import create_runs, load
from tests.support.workers import WorkerProcess

pytestmark = pytest.mark.fast("processes")

P = "proj-out-kill"
TOKENS = [f"t{i} " for i in range(8)]


@pytest.mark.connections(17)
async def test_a_killed_workers_flushed_output_stays_and_the_retry_is_marked(
    fast: Settings, db: Database, tmp_path: Path
) -> None:
    _, read = await credentials.create_management_token(db, P, "read")
    payload = {"tokens": TOKENS, "hang_on_attempts": [1], "hang_after": 4, "every_s": 0.05}
    [run_id] = await create_runs(db, P, payload=payload)
    first = WorkerProcess(
        fast, tmp_path, "w1", handler="tests.support.output:tokens", args=("--no-streams",)
    )
    second = WorkerProcess(
        fast, tmp_path, "w2", handler="tests.support.output:tokens", args=("--no-streams",)
    )
    seen: list[Event] = []
    try:
        first.start()
        async with (
            serving(fast) as (_, base),
            httpx.AsyncClient(base_url=base, headers=bearer(read), timeout=30) as http,
            events(http, f"/v1/projects/{P}/runs/{run_id}/output") as stream,
        ):
            # Attempt 1 streams four tokens, then hangs: read them live, then kill its worker.
            while texts(seen) != "".join(TOKENS[:4]):
                seen.append(await stream.next(timeout_s=60))
            first.signal(signal.SIGKILL)
            assert first.wait() == -signal.SIGKILL
            second.start()  # takes the run once attempt 1's lease ran out
            rest = await stream.until_end(timeout_s=60)
    finally:
        first.stop()
        second.stop()
    names = [e.name for e in rest]
    assert names[0] == "abandoned" and rest[0].data == {"attempt": 1, "by": 2}
    assert names[-1] == "end" and rest[-1].data == {"status": "COMPLETED", "attempt": 2}
    assert {e.data["attempt"] for e in rest if e.name == "output"} == {2}
    assert texts(rest) == "".join(TOKENS)  # attempt 2 emitted from the top
    ids = [e.id for e in seen + rest if e.name == "output"]
    assert ids == sorted(set(ids))  # each chunk once, in order, on one stream
    rows = await rows_of(db, P, run_id)
    assert "".join(r.text for r in rows if r.attempt == 1) == "".join(TOKENS[:4])  # it stays
    assert [r.seq for r in rows] == ids
    assert (await load(db, P, run_id)).attempt_count == 2
