"""Streamed run output on real Postgres and Redis: a handler's ``run.emit_output`` through an
in-process worker, read live as server-sent events from the server ``awooop serve`` runs
(uvicorn, in process), resumed with ``Last-Event-ID``; the lease fence; a retried attempt's
output marked abandoned; the limit; the stream caps; tenant isolation; retention; the JSON
read; the console and the CLI."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import msgspec
import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.ingest import credentials
from awooop.runs import leases, output_log
from awooop.worker.assembly import build_worker
from awooop.worker.context import RunContext
from awooop.worker.executor import Handler
from tests.integration.test_tenant_capacity import serving
from tests.support.console import log_in
from tests.support.http import app_client
from tests.support.output import Event, events, feed, paced
from tests.support.runs import create_runs, load
from tests.support.waiting import eventually
from tests.support.workers import cli

P, Q = "proj-out-a", "proj-out-b"


@asynccontextmanager
async def running_worker(db: Database, settings: Settings, handler: Handler) -> AsyncIterator[None]:
    """An in-process worker (polling path) serving until the block ends."""
    worker = build_worker(db=db, settings=settings, handler=handler, concurrency=4).worker
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def rows_of(db: Database, project: str, run_id: uuid.UUID) -> list[output_log.Chunk]:
    page = await db.in_tenant(project, lambda c: output_log.page(c, run_id, 0, 200))
    assert page is not None
    return page.rows


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def texts(seen: list[Event]) -> str:
    return "".join(e.data["text"] for e in seen if e.name == "output")


@pytest.mark.connections(11)
async def test_a_streamed_answer_is_read_live_and_resumed_every_chunk_once_in_order(
    fast: Settings, db: Database
) -> None:
    _, read = await credentials.create_management_token(db, P, "read")
    name = f"live-{uuid.uuid4().hex[:8]}"
    queue = feed(name)
    [run_id] = await create_runs(db, P, payload={"feed": name})
    url = f"/v1/projects/{P}/runs/{run_id}/output"
    tokens = [f"token{i} " for i in range(9)]
    async with (
        running_worker(db, fast, paced),
        serving(fast) as (_, base),
        httpx.AsyncClient(base_url=base, headers=bearer(read), timeout=30) as http,
    ):
        first: list[Event] = []
        async with events(http, url) as stream:
            for token in tokens[:3]:  # each read live, while the run is still RUNNING
                await queue.put(token)
                event = await stream.next()
                assert event.name == "output" and event.data["text"] == token, event
                assert event.data["attempt"] == 1
                first.append(event)
            assert (await load(db, P, run_id)).status == "RUNNING"
        # Disconnected mid-stream; the answer goes on meanwhile.
        for token in tokens[3:6]:
            await queue.put(token)
        await eventually(
            lambda: _text_of(db, run_id), equals="".join(tokens[:6]), what="six tokens flushed"
        )
        resumed = {"last-event-id": str(first[-1].id)}
        async with events(http, url, headers=resumed) as stream:
            for token in tokens[6:]:
                await queue.put(token)
            await queue.put(None)  # the handler returns: the run completes
            rest = await stream.until_end()
    seen = first + rest
    chunks = [e for e in seen if e.name == "output"]
    assert texts(seen) == "".join(tokens)  # every token once, in order
    ids = [e.id for e in chunks]
    assert ids == sorted(set(ids)) and ids == [r.seq for r in await rows_of(db, P, run_id)]
    assert [e.name for e in rest][-1] == "end" and "abandoned" not in {e.name for e in seen}
    assert rest[-1].data == {"status": "COMPLETED", "attempt": 1}
    offsets = [(e.data["offset"], e.data["end"]) for e in chunks]
    assert offsets[0][0] == 0 and all(a[1] == b[0] for a, b in itertools.pairwise(offsets))
    assert offsets[-1][1] == len("".join(tokens).encode())


async def _text_of(db: Database, run_id: uuid.UUID) -> str:
    return "".join(r.text for r in await rows_of(db, P, run_id))


async def test_a_fenced_off_attempt_appends_nothing_and_a_retry_marks_it_abandoned(
    fast: Settings, db: Database
) -> None:
    _, manage = await credentials.create_management_token(db, P, "manage")
    name = f"retry-{uuid.uuid4().hex[:8]}"
    [run_id] = await create_runs(db, P, payload={"feed": name})
    # Attempt 1 belongs to a worker that streamed part of an answer and then went silent.
    assert await db.in_tenant(P, lambda c: leases.claim(c, run_id, "gone", 1.0))

    async def append(worker_id: str, attempt: int, text: str) -> output_log.Appended:
        return await db.in_run_statement(
            lambda c: output_log.append(
                c,
                run_id,
                worker_id,
                attempt,
                text,
                len(text.encode()),
                truncated=False,
                max_bytes=10**6,
            )
        )

    written = await append("gone", 1, "The answer is ")
    assert written.held and written.written == 1
    assert not (await append("other", 1, "x")).held  # another worker's write: fenced off
    assert not (await append("gone", 2, "x")).held  # another attempt's: fenced off
    queue = feed(name)
    await queue.put("forty-two.")
    await queue.put(None)
    async with running_worker(db, fast, paced):  # takes the run once attempt 1's lease ran out
        await eventually(
            lambda: _status(db, run_id),
            equals="COMPLETED",
            what="attempt 2 completed",
            timeout_s=30,
        )
    stale = await append("gone", 1, "too late")
    assert not stale.held and stale.written is None  # the stale attempt cannot append
    rows = await rows_of(db, P, run_id)
    assert [(r.attempt, r.text) for r in rows] == [(1, "The answer is "), (2, "forty-two.")]
    assert rows[1].offset == rows[0].end  # one offset log across attempts

    async with app_client(fast, db, bearer=manage) as http:
        url = f"/v1/projects/{P}/runs/{run_id}/output"
        body = (await http.get(url, params={"format": "json"})).json()
        assert body["final"] and not body["more"] and body["attempt"] == 2
        assert [(c["attempt"], c["abandoned"]) for c in body["chunks"]] == [(1, True), (2, False)]
        # A finished run's stream: everything, the abandoned attempt marked, then the end.
        streamed = await http.get(url, headers={"accept": "text/event-stream"})
        assert streamed.headers["content-type"].startswith("text/event-stream")
        names = [
            line.split(": ", 1)[1]
            for line in streamed.text.splitlines()
            if line.startswith("event:")
        ]
        assert names == ["output", "abandoned", "output", "end"]
        assert 'data: {"attempt":1,"by":2}' in streamed.text
        assert '"status":"COMPLETED","attempt":2' in streamed.text
        # Resumed after attempt 1's chunk, the reader is told it was abandoned.
        again = await http.get(url, headers={"last-event-id": "1"})
        assert [ln for ln in again.text.splitlines() if ln.startswith("event:")] == [
            "event: abandoned",
            "event: output",
            "event: end",
        ]
        # Paged JSON: one chunk at a time.
        one = (await http.get(url, params={"format": "json", "limit": "1"})).json()
        assert [c["seq"] for c in one["chunks"]] == [1] and one["more"] and one["next"] == 1
        two = (await http.get(url, params={"format": "json", "after": one["next"]})).json()
        assert [c["text"] for c in two["chunks"]] == ["forty-two."] and not two["more"]
        head = await http.head(url)  # opens no stream
        assert head.status_code == 200 and head.headers["content-type"] == "application/json"
        for bad in ({"after": "-3"}, {"limit": "0"}, {"format": "xml"}):
            refused = await http.get(url, params={"format": "json", **bad})
            assert refused.status_code == 400 and refused.json()["code"] == "E-INPUT-001"


async def _status(db: Database, run_id: uuid.UUID) -> str:
    return str((await load(db, P, run_id)).status)


async def test_output_past_the_limit_is_cut_with_a_marker_and_the_run_completes(
    fast: Settings, db: Database
) -> None:
    small = msgspec.structs.replace(fast, output_max_bytes=12, output_flush_interval_s=0.01)
    _, read = await credentials.create_management_token(db, P, "read")
    name = f"cut-{uuid.uuid4().hex[:8]}"
    queue = feed(name)
    for text in ("hello ", "wörld, and more", "dropped"):
        await queue.put(text)
    await queue.put(None)
    [run_id] = await create_runs(db, P, payload={"feed": name})
    async with running_worker(db, small, paced):
        await eventually(lambda: _status(db, run_id), equals="COMPLETED", what="completed")
    rows = await rows_of(db, P, run_id)
    assert "".join(r.text for r in rows) == "hello wörld"  # 12 bytes: ö is two
    assert rows[-1].truncated and rows[-1].text == "" and rows[-1].offset == 12
    async with app_client(small, db, bearer=read) as http:
        answer = await http.get(f"/v1/projects/{P}/runs/{run_id}/output")
    lines = [ln for ln in answer.text.splitlines() if ln.startswith("event:")]
    assert lines[-2:] == ["event: truncated", "event: end"]


async def test_stream_caps_answer_429_and_an_open_stream_holds_no_request_share(
    settings: Settings, db: Database
) -> None:
    _, read_p = await credentials.create_management_token(db, P, "read")
    _, read_q = await credentials.create_management_token(db, Q, "read")
    [run_p] = await create_runs(db, P)  # PENDING: no worker, the streams stay open
    [run_q] = await create_runs(db, Q)
    capped = {"output_streams_per_project": 1, "output_streams": 2, "http_tenant_requests": 1}
    async with (
        serving(settings, **capped) as (_, base),
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        url_p = f"/v1/projects/{P}/runs/{run_p}/output"
        url_q = f"/v1/projects/{Q}/runs/{run_q}/output"
        async with events(http, url_p, bearer(read_p)):  # its slot is taken once it answers
            refused = await http.get(url_p, headers=bearer(read_p))
            assert refused.status_code == 429 and refused.json()["code"] == "E-OUTPUT-001"
            assert refused.headers["retry-after"] == "5"
            # The open stream holds none of the project's share of management requests (1).
            assert (
                await http.get(f"/v1/projects/{P}/runs/{run_p}", headers=bearer(read_p))
            ).status_code == 200
            json_read = await http.get(url_p, headers=bearer(read_p), params={"format": "json"})
            assert json_read.status_code == 200 and json_read.json()["chunks"] == []
            async with events(http, url_q, bearer(read_q)):
                full = await http.get(url_q, headers=bearer(read_q))
                assert full.status_code == 429 and full.json()["code"] == "E-OUTPUT-002"
        # Both closed: their slots are given back.
        async with events(http, url_p, bearer(read_p)), events(http, url_q, bearer(read_q)):
            pass


async def test_another_projects_token_reads_nothing(settings: Settings, db: Database) -> None:
    _, read_q = await credentials.create_management_token(db, Q, "read")
    _, admin = await credentials.create_management_token(db, "__platform__", "admin")
    [run_p] = await create_runs(db, P)
    await db.in_tenant(P, lambda c: leases.claim(c, run_p, "w", 30))
    written = await db.in_run_statement(
        lambda c: output_log.append(c, run_p, "w", 1, "secret", 6, truncated=False, max_bytes=100)
    )
    assert written.written == 1
    async with app_client(settings, db) as http:
        own = f"/v1/projects/{P}/runs/{run_p}/output"
        for params in ({}, {"format": "json"}):
            other = await http.get(own, headers=bearer(read_q), params=params)
            assert other.status_code == 403 and other.json()["code"] == "E-AUTH-002"
            assert "secret" not in other.text
            # Under another project's path the run does not exist (row-level security).
            hidden = await http.get(
                f"/v1/projects/{Q}/runs/{run_p}/output", headers=bearer(admin), params=params
            )
            assert hidden.status_code == 404 and hidden.json()["code"] == "E-RUN-003"
            anonymous = await http.get(own, params=params)
            assert anonymous.status_code == 401 and "secret" not in anonymous.text
        shown = await http.get(own, headers=bearer(admin), params={"format": "json"})
        assert [c["text"] for c in shown.json()["chunks"]] == ["secret"]


async def test_retention_deletes_old_output_in_batches(settings: Settings, db: Database) -> None:
    [old, new] = await create_runs(db, P, 2)
    for run_id in (old, new):
        await db.in_tenant(P, lambda c, r=run_id: leases.claim(c, r, "w", 30))
        for i in range(3):
            await db.in_run_statement(
                lambda c, r=run_id, i=i: output_log.append(
                    c, r, "w", 1, f"chunk {i} ", 8, truncated=False, max_bytes=1000
                )
            )
    async with db.platform_writes() as conn:
        await conn.execute(
            "UPDATE awooop_run_output SET created_at = now() - interval '8 days' WHERE run_id = $1",
            old,
        )
    assert await output_log.expire_once(db, 7 * 86400.0, batch=2) == 3
    assert await rows_of(db, P, old) == [] and len(await rows_of(db, P, new)) == 3
    assert await output_log.expire_once(db, 7 * 86400.0) == 0


async def test_the_console_shows_the_output_and_streams_it_to_a_read_session(
    settings: Settings, db: Database
) -> None:
    _, read = await credentials.create_management_token(db, P, "read")
    _, read_q = await credentials.create_management_token(db, Q, "read")
    [run_id] = await create_runs(db, P)
    await db.in_tenant(P, lambda c: leases.claim(c, run_id, "w", 30))
    for text in ("<b>bold</b> ", "plain"):
        await db.in_run_statement(
            lambda c, t=text: output_log.append(
                c, run_id, "w", 1, t, len(t), truncated=False, max_bytes=1000
            )
        )
    async with app_client(settings, db) as http:
        await log_in(http, read)
        page = await http.get(f"/ui/runs/{P}/{run_id}")
        assert page.status_code == 200
        assert "&lt;b&gt;bold&lt;/b&gt; plain" in page.text  # escaped, whole, without script
        assert f'data-src="/ui/runs/{P}/{run_id}/output"' in page.text
        assert 'data-after="2"' in page.text and "/ui/static/console-output.js" in page.text
        script = await http.get("/ui/static/console-output.js")
        assert script.status_code == 200 and "EventSource" in script.text
        streamed = await http.get(f"/ui/runs/{P}/{run_id}/output", params={"format": "json"})
        assert [c["text"] for c in streamed.json()["chunks"]] == ["<b>bold</b> ", "plain"]
    async with app_client(settings, db) as other:
        await log_in(other, read_q)
        refused = await other.get(f"/ui/runs/{P}/{run_id}/output", params={"format": "json"})
        assert refused.status_code == 403 and "bold" not in refused.text
    async with app_client(settings, db) as anonymous:
        gone = await anonymous.get(f"/ui/runs/{P}/{run_id}/output")
        assert gone.status_code == 401


async def test_the_cli_prints_the_output_and_follows_a_run_to_its_end(
    fast: Settings, db: Database
) -> None:
    name = f"cli-{uuid.uuid4().hex[:8]}"
    queue = feed(name)
    for text in ("one ", "two ", "three"):
        await queue.put(text)
    await queue.put(None)
    [run_id] = await create_runs(db, P, payload={"feed": name})
    async with running_worker(db, fast, paced):
        await eventually(lambda: _status(db, run_id), equals="COMPLETED", what="completed")
    printed = await asyncio.to_thread(cli, fast, "runs", "output", P, str(run_id))
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == "one two three"
    followed = await asyncio.to_thread(cli, fast, "runs", "output", str(run_id), "--follow")
    assert followed.returncode == 0 and followed.stdout == "one two three"
    assert "COMPLETED" in followed.stderr
    as_json = await asyncio.to_thread(cli, fast, "runs", "output", P, str(run_id), "--json")
    lines = [msgspec.json.decode(line) for line in as_json.stdout.splitlines()]
    assert "".join(item.get("text", "") for item in lines) == "one two three"
    assert lines[-1] == {"event": "end", "status": "COMPLETED", "attempt": 1}
    missing = await asyncio.to_thread(cli, fast, "runs", "output", P, str(uuid.uuid4()))
    assert missing.returncode == 1 and "E-RUN-003" in missing.stderr


async def test_emits_are_coalesced_into_bounded_rows_and_a_failed_attempts_output_stays(
    fast: Settings, db: Database
) -> None:
    rows_of_16 = msgspec.structs.replace(fast, output_flush_bytes=16, output_flush_interval_s=0.2)
    name = f"many-{uuid.uuid4().hex[:8]}"
    queue = feed(name)
    small = [f"{i % 10}" for i in range(40)]  # 40 one-byte emits at once
    for text in [*small, "é" * 20]:  # then one emit of 40 bytes
        await queue.put(text)
    await queue.put(None)
    [run_id] = await create_runs(db, P, payload={"feed": name})
    async with running_worker(db, rows_of_16, paced):
        await eventually(lambda: _status(db, run_id), equals="COMPLETED", what="completed")
    rows = await rows_of(db, P, run_id)
    assert "".join(r.text for r in rows) == "".join(small) + "é" * 20
    assert len(rows) <= 8  # not a row per emit: 80 bytes in rows of at most 16
    assert all(len(r.text.encode()) <= 16 for r in rows)
    assert [r.offset for r in rows[1:]] == [r.end for r in rows[:-1]]

    async def fails(run: RunContext) -> None:
        await run.emit_output("what it got to ")
        raise ValueError("the model answered nonsense")

    [failed] = await create_runs(db, P, payload={})
    async with running_worker(db, fast, fails):
        await eventually(lambda: _status(db, failed), equals="FAILED", what="failed")
    assert [r.text for r in await rows_of(db, P, failed)] == ["what it got to "]
