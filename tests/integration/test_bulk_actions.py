"""Bulk actions by filter: preview, one operation, batches with progress, each run
changed once per operation (also when resumed or run twice at once), the actor and the
operation id on every event; the console's scopes and CSRF; the CLI's --filter and --dry-run."""

from __future__ import annotations

import asyncio
import getpass
import re
import time
import uuid
from collections import Counter
from typing import Any

import asyncpg
import pytest

from awooop.cli import build_parser
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import InvalidInputError
from awooop.core.events import run_stream_id
from awooop.ingest import credentials
from awooop.runs import bulk, listing
from tests.integration.test_console import log_in
from tests.support.console import csrf_of
from tests.support.http import app_client
from tests.support.runs import create_failed_runs, create_runs, event_types, load
from tests.support.waiting import eventually

P, Q = "proj-bulk", "proj-bulk-other"

RETRIED = """
SELECT stream_id, metadata FROM awooop_events
WHERE event_type = $1 AND project_id = $2
"""


async def events_by_run(db: Database, project: str, event_type: str) -> dict[str, list[Any]]:
    async with db.platform() as conn:
        rows = await conn.fetch(RETRIED, event_type, project)
    found: dict[str, list[Any]] = {}
    for row in rows:
        found.setdefault(row["stream_id"], []).append(row["metadata"])
    return found


async def operations(db: Database) -> list[dict[str, Any]]:
    async with db.platform() as conn:
        return [dict(r.items()) for r in await conn.fetch("SELECT * FROM awooop_operations")]


async def test_bulk_retry_of_1000_failed_runs_from_the_console(
    settings: Settings, db: Database
) -> None:
    token_id, token = await credentials.create_management_token(db, P, "manage")
    failed = await create_failed_runs(db, P, 1000)
    [pending] = await create_runs(db, P)
    [elsewhere] = await create_failed_runs(db, Q, 1)
    async with app_client(settings, db) as http:
        await log_in(http, token)
        listed = await http.get("/ui/runs", params={"status": "FAILED"})
        assert 'id="bulk-retry" href="/ui/bulk/retry?status=FAILED"' in listed.text

        preview = await http.get("/ui/bulk/retry", params={"status": "FAILED"})
        assert preview.status_code == 200
        assert re.search(r'id="total">1000<', preview.text)
        assert f"<td>{P}</td><td>1000</td>" in preview.text and Q not in preview.text
        csrf = csrf_of(preview)

        started = time.monotonic()
        confirmed = await http.post(
            "/ui/bulk/retry",
            data={"csrf": csrf, "status": "FAILED", "attempts": "2", "actor": "Ann"},
        )
        assert confirmed.status_code == 303
        target = confirmed.headers["location"]
        assert target.startswith("/ui/operations/")
        seen: list[int] = []
        while True:
            page = await http.get(target)
            assert page.status_code == 200
            progress = re.search(r'id="progress">(\d+) of 1000<', page.text)
            assert progress is not None
            seen.append(int(progress.group(1)))
            if 'id="state">done<' in page.text:
                break
            assert time.monotonic() - started < 120
            await asyncio.sleep(0.05)
        assert seen == sorted(seen) and seen[-1] == 1000
        assert re.search(r'id="changed">1000<', page.text)

    [op] = await operations(db)
    assert op["kind"] == "retry" and op["state"] == "done" and op["project_id"] == P
    assert (op["expected"], op["scanned"], op["changed"], op["refused"]) == (1000, 1000, 1000, 0)
    assert op["batches"] == 10  # of 100 each (then an empty look finds the end)
    assert op["actor"] == f"manage-token:{token_id}" and op["person"] == "Ann"

    events = await events_by_run(db, P, "RunRetried")
    assert set(events) == {run_stream_id(r) for r in failed}
    assert all(len(metas) == 1 for metas in events.values())
    assert {
        (m["actor"], m["operation_id"], m["via"]) for metas in events.values() for m in metas
    } == {(f"manage-token:{token_id}", str(op["operation_id"]), "console")}
    state = await load(db, P, failed[0])
    assert state.status.value == "PENDING" and state.max_attempts == state.attempt_count + 2
    assert (await load(db, P, pending)).status.value == "PENDING"
    assert (await load(db, Q, elsewhere)).status.value == "FAILED"


async def test_each_run_changes_once_when_resumed_after_a_crash_or_run_twice(
    db: Database,
) -> None:
    failed = await create_failed_runs(db, P, 45)
    f = listing.RunFilter(project=P, status=listing.RunStatus.FAILED)

    async def create(conn: Any) -> bulk.Operation:
        preview = await bulk.preview(conn, "retry", f)
        assert (preview.total, preview.by_project, preview.by_code) == (
            45,
            {P: 45},
            {"E-TEST-001": 45},
        )
        assert len(preview.runs) == 45  # all of them: fewer than a page
        return await bulk.create(conn, "retry", f, actor="cli:test", via="cli", expected=45)

    op = await db.in_tenant(P, create)

    class Crash(Exception):
        pass

    async def crash_mid_batch(conn: Any) -> None:
        await bulk.run_batch(conn, op.operation_id, size=10)
        raise Crash  # the process dies before the batch commits

    with pytest.raises(Crash):
        await db.in_tenant(P, crash_mid_batch)
    after_one = await db.in_tenant(P, lambda c: bulk.run_batch(c, op.operation_id, size=10))
    assert (after_one.scanned, after_one.changed, after_one.batches) == (10, 10, 1)

    # Resumed by two executors at once: the operation row makes them take turns.
    done = await asyncio.gather(
        bulk.execute(db, P, op.operation_id, size=7), bulk.execute(db, P, op.operation_id, size=7)
    )
    assert {d.state for d in done} == {"done"}
    final = await db.in_tenant(P, lambda c: bulk.get(c, op.operation_id))
    assert (final.scanned, final.changed, final.refused) == (45, 45, 0)
    events = await events_by_run(db, P, "RunRetried")
    assert Counter(len(m) for m in events.values()) == Counter({1: 45})
    assert set(events) == {run_stream_id(r) for r in failed}
    # Resuming a finished operation changes nothing.
    again = await bulk.execute(db, P, op.operation_id)
    assert again.changed == 45


async def test_bulk_cancel_skips_finished_runs_and_announces_each_cancel(
    db: Database, database_url: str
) -> None:
    live = await create_runs(db, P, 3)
    await create_failed_runs(db, P, 2)
    f = listing.RunFilter(project=P)
    preview = await db.in_tenant(P, lambda c: bulk.preview(c, "cancel", f))
    assert preview.total == 3  # FAILED runs are finished: a cancel does not apply

    async def create(conn: Any) -> bulk.Operation:
        return await bulk.create(
            conn, "cancel", f, actor="cli:test", via="cli", expected=3, reason="wrong input"
        )

    op = await db.in_tenant(P, create)
    heard: list[str] = []
    listener = await asyncpg.connect(database_url)
    try:
        await listener.add_listener("awooop_run_cancelled", lambda *a: heard.append(a[3]))
        done = await bulk.execute(db, P, op.operation_id)
        await eventually(lambda: len(heard) == 3, what="three cancel notices")
    finally:
        await listener.close()
    assert (done.changed, done.refused) == (3, 0)
    assert sorted(heard) == sorted(str(r) for r in live)
    for run_id in live:
        state = await load(db, P, run_id)
        assert state.status.value == "CANCELLED" and state.failure_reason == "wrong input"


async def test_read_scope_sees_no_bulk_action_and_is_refused(
    settings: Settings, db: Database
) -> None:
    _, reader = await credentials.create_management_token(db, P, "read")
    _, manager = await credentials.create_management_token(db, P, "manage")
    await create_failed_runs(db, P, 2)
    async with app_client(settings, db) as http:
        csrf = await log_in(http, reader)
        listed = await http.get("/ui/runs")
        assert "bulk-retry" not in listed.text
        assert (await http.get("/ui/bulk/retry")).status_code == 403
        forged = await http.post("/ui/bulk/retry", data={"csrf": csrf, "status": "FAILED"})
        assert forged.status_code == 403 and "E-AUTH-004" in forged.text
    async with app_client(settings, db) as http:
        await log_in(http, manager)
        no_csrf = await http.post("/ui/bulk/retry", data={"status": "FAILED"})
        assert no_csrf.status_code == 403 and "E-AUTH-005" in no_csrf.text
        other = await http.get("/ui/bulk/retry", params={"project": Q})
        assert other.status_code == 403
        missing = await http.get(f"/ui/operations/{uuid.uuid4()}")
        assert missing.status_code == 404 and "E-OPERATION-001" in missing.text
    assert await operations(db) == []


async def test_cli_retry_by_filter_with_dry_run(
    settings: Settings, db: Database, capsys: pytest.CaptureFixture[str]
) -> None:
    failed = await create_failed_runs(db, P, 3)
    await create_failed_runs(db, Q, 1)

    async def awooop(*argv: str) -> None:
        args = build_parser().parse_args(list(argv))
        assert await args.run(settings, args) == 0

    argv = ["runs", "retry", "--filter", f"project={P}", "--filter", "status=FAILED"]
    await awooop(*argv, "--dry-run")
    out = capsys.readouterr().out
    assert "3 run(s) to retry" in out and re.search(rf"{P} +3", out)
    assert await operations(db) == []

    await awooop(*argv, "--actor", "Bob")
    printed = capsys.readouterr()
    assert "batch 1: 3 of 3 looked at, 3 retried, 0 refused" in printed.err
    [op] = await operations(db)
    assert f"operation {op['operation_id']} done: 3 retried, 0 refused" in printed.out
    events = await events_by_run(db, P, "RunRetried")
    assert set(events) == {run_stream_id(r) for r in failed}
    assert all(m[0]["operation_id"] == str(op["operation_id"]) for m in events.values())
    assert all(m[0]["actor"] == f"cli:{getpass.getuser()}" for m in events.values())

    await awooop("runs", "operation", str(op["operation_id"]), "--json")
    assert '"state":"done"' in capsys.readouterr().out
    with pytest.raises(InvalidInputError):
        await awooop("runs", "retry", "--filter", "colour=red")
    with pytest.raises(InvalidInputError):
        await awooop("runs", "retry")


# A test-only trigger: Postgres refuses the event of one run (the owner creates it, as a
# migration would). AFTER INSERT, so the run's row update before it is undone with it.
POISON = """
CREATE FUNCTION refuse_poisoned_run() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'poisoned run: % refused', NEW.stream_id;
END
$$;
CREATE TRIGGER refuse_poisoned_run AFTER INSERT ON awooop_events
    FOR EACH ROW WHEN (NEW.stream_id = '{stream_id}' AND NEW.event_type = 'RunRetried')
    EXECUTE FUNCTION refuse_poisoned_run();
"""
STREAM_HEAD = "SELECT version FROM awooop_event_streams WHERE stream_id = $1"


async def test_a_run_postgres_refuses_fails_only_itself(
    settings: Settings, db: Database, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    failed = await create_failed_runs(db, P, 250)
    poisoned = failed[137]  # somewhere in the middle batch of three
    owner = await asyncpg.connect(database_url)
    try:
        await owner.execute(POISON.format(stream_id=run_stream_id(poisoned)))
    finally:
        await owner.close()

    args = build_parser().parse_args(
        ["runs", "retry", "--filter", f"project={P}", "--filter", "status=FAILED"]
    )
    assert await args.run(settings, args) == 0  # through bulk.execute, batches of 100
    [op] = await operations(db)
    assert f"operation {op['operation_id']} done: 249 retried, 1 refused" in capsys.readouterr().out
    assert op["state"] == "done" and op["finished_at"] is not None
    assert (op["expected"], op["scanned"], op["changed"], op["refused"], op["skipped"]) == (
        250,
        250,
        249,
        1,
        0,
    )
    assert op["batches"] == 3
    [error] = op["errors"]
    assert error["run_id"] == str(poisoned) and error["code"] == "E-DB"
    assert f"poisoned run: run-{poisoned} refused" in error["message"]

    # Every other run once, with the operation on its event; the batch around the poisoned
    # run was written run by run, and its other 99 runs are among them.
    events = await events_by_run(db, P, "RunRetried")
    assert set(events) == {run_stream_id(r) for r in failed if r != poisoned}
    assert all(len(metas) == 1 for metas in events.values())
    assert {
        (m["actor"], m["operation_id"], m["via"]) for metas in events.values() for m in metas
    } == {(f"cli:{getpass.getuser()}", str(op["operation_id"]), "cli")}
    retried = await load(db, P, failed[136])
    assert retried.status.value == "PENDING" and retried.version == 3

    # Nothing of the poisoned run's change is left: not its row, not its stream, not an event.
    state = await load(db, P, poisoned)
    assert (state.status.value, state.version, state.max_attempts) == ("FAILED", 2, 3)
    assert await event_types(db, P, poisoned) == ["RunCreated", "RunFailed"]
    async with db.platform() as conn:
        assert await conn.fetchval(STREAM_HEAD, run_stream_id(poisoned)) == 2


# The run's event meets a serialization failure twice (a sequence counts across the rolled
# back attempts); SECURITY DEFINER: the tenant role writing the event may not use the sequence.
CONFLICT_TWICE = """
CREATE SEQUENCE conflicts_met;
CREATE FUNCTION conflict_twice() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = public, pg_temp AS $$
BEGIN
    IF nextval('conflicts_met') <= 2 THEN
        RAISE EXCEPTION 'conflict on %', NEW.stream_id USING ERRCODE = 'serialization_failure';
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER conflict_twice AFTER INSERT ON awooop_events
    FOR EACH ROW WHEN (NEW.stream_id = '{stream_id}' AND NEW.event_type = 'RunRetried')
    EXECUTE FUNCTION conflict_twice();
"""


async def test_a_transient_conflict_retries_the_batch_and_refuses_no_run(
    db: Database, database_url: str
) -> None:
    failed = await create_failed_runs(db, P, 10)
    owner = await asyncpg.connect(database_url)
    try:
        await owner.execute(CONFLICT_TWICE.format(stream_id=run_stream_id(failed[3])))
        f = listing.RunFilter(project=P)
        op = await db.in_tenant(
            P, lambda c: bulk.create(c, "retry", f, actor="cli:test", via="cli", expected=10)
        )
        done = await bulk.execute(db, P, op.operation_id)
        # Met in the batch's write and again on the first retry of the whole transaction:
        # neither is the run's own fault, so it is not refused; the third attempt writes it.
        assert await owner.fetchval("SELECT last_value FROM conflicts_met") == 3
    finally:
        await owner.close()
    assert (done.state, done.changed, done.refused, done.errors) == ("done", 10, 0, [])
    events = await events_by_run(db, P, "RunRetried")
    assert Counter(len(m) for m in events.values()) == Counter({1: 10})
