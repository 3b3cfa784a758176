"""`awooop runs list|show|retry` in process on real Postgres (the parser and the command code)."""

from __future__ import annotations

import asyncio
import getpass
import uuid

import msgspec
import pytest

from awooop.cli import build_parser
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import DeliveryLimitError, InvalidInputError, RunNotFoundError
from awooop.core.events import run_stream_id
from awooop.eventlog import eventlog
from awooop.runs import leases
from tests.support.runs import create_runs, load

P, Q = "proj-list-a", "proj-list-b"
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


async def awooop(settings: Settings, capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    args = build_parser().parse_args(list(argv))
    assert await args.run(settings, args) == 0
    out: str = capsys.readouterr().out
    return out


async def failed_run(db: Database, project: str) -> uuid.UUID:
    [run_id] = await create_runs(db, project)
    meta = {"traceparent": TRACEPARENT}
    assert await db.in_tenant(project, lambda c: leases.claim(c, run_id, "w1", 0.01, meta))
    await asyncio.sleep(0.05)  # the lease expires: the dead-letter path may fail the run
    failed = await db.in_tenant(
        project,
        lambda c: leases.fail_undeliverable(
            c, run_id, "w2", "delivered too often", DeliveryLimitError.code
        ),
    )
    assert failed is not None and failed.status == "FAILED"
    return run_id


async def test_list_filters_orders_and_prints_json_or_a_table(
    settings: Settings, db: Database, capsys: pytest.CaptureFixture[str]
) -> None:
    pending = await create_runs(db, P, 3)
    other = await create_runs(db, Q, 2)
    failed = await failed_run(db, P)

    listed = msgspec.json.decode(await awooop(settings, capsys, "runs", "list", "--json"))
    assert {r["run_id"] for r in listed} == {str(r) for r in [*pending, *other, failed]}
    assert listed[0]["run_id"] == str(failed)  # most recently changed first
    updated = [r["updated_at"] for r in listed]
    assert updated == sorted(updated, reverse=True)

    mine = msgspec.json.decode(
        await awooop(settings, capsys, "runs", "list", "--project", P, "--json")
    )
    assert {r["project_id"] for r in mine} == {P} and len(mine) == 4
    bad = msgspec.json.decode(
        await awooop(
            settings, capsys, "runs", "list", "--status", "failed", "--since", "1h", "--json"
        )
    )
    assert [(r["run_id"], r["failure_code"], r["attempt_count"]) for r in bad] == [
        (str(failed), "E-RUN-005", 1)
    ]
    future = await awooop(
        settings, capsys, "runs", "list", "--since", "2999-01-01T00:00:00Z", "--json"
    )
    assert msgspec.json.decode(future) == []
    two = msgspec.json.decode(
        await awooop(settings, capsys, "runs", "list", "--limit", "2", "--json")
    )
    assert len(two) == 2

    text = await awooop(settings, capsys, "runs", "list", "--project", Q)
    header, *rows = text.rstrip("\n").splitlines()
    assert header.split() == [
        "RUN_ID",
        "PROJECT",
        "STATUS",
        "BLOCKED_ON",
        "ATTEMPTS",
        "WORKER",
        "FAILURE",
        "CREATED",
        "UPDATED",
    ]
    assert len(rows) == 2 and all(Q in row and "PENDING" in row for row in rows)
    column = header.index("STATUS")
    assert all(row[column:].startswith("PENDING") for row in rows)  # aligned


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (("--since", "yesterday"), "--since 'yesterday'"),
        (("--since", "15x"), "ISO timestamp"),
        (("--status", "DONE"), "expected one of PENDING"),
        (("--limit", "0"), "--limit"),
    ],
)
async def test_bad_filters_are_clear_errors(
    settings: Settings, argv: tuple[str, ...], fragment: str
) -> None:
    args = build_parser().parse_args(["runs", "list", *argv])
    with pytest.raises(InvalidInputError) as refused:
        await args.run(settings, args)
    assert refused.value.code == "E-INPUT-001" and fragment in refused.value.message


async def test_show_prints_state_and_timeline_without_the_project(
    settings: Settings, db: Database, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = await failed_run(db, P)
    shown = msgspec.json.decode(
        await awooop(settings, capsys, "runs", "show", str(run_id), "--json")
    )
    assert shown["state"]["status"] == "FAILED" and shown["state"]["project_id"] == P
    assert [
        (t["version"], t["event_type"], t["attempt"], t["worker_id"], t["trace_id"])
        for t in shown["timeline"]
    ] == [
        (1, "RunCreated", 0, None, None),
        (2, "RunClaimed", 1, "w1", TRACEPARENT.split("-")[1]),
        (3, "RunFailed", 1, None, None),
    ]
    text = await awooop(settings, capsys, "runs", "show", P, str(run_id))
    assert "failure_code" in text and "E-RUN-005" in text
    timeline_header = next(line for line in text.splitlines() if line.startswith("VERSION"))
    assert timeline_header.split() == [
        "VERSION",
        "AT",
        "EVENT",
        "ATTEMPT",
        "WORKER",
        "TRACE_ID",
        "ACTOR",
        "DETAIL",
    ]
    args = build_parser().parse_args(["runs", "show", str(uuid.uuid4())])
    with pytest.raises(RunNotFoundError):
        await args.run(settings, args)


async def test_retry_records_the_cli_actor_in_the_event_metadata(
    settings: Settings, db: Database, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = await failed_run(db, P)
    out = await awooop(settings, capsys, "runs", "retry", str(run_id), "--json")
    assert msgspec.json.decode(out)["status"] == "PENDING"
    async with db.tenant(P) as conn:
        last = (await eventlog.read_stream(conn, run_stream_id(run_id)))[-1]
    assert last.event_type == "RunRetried"
    assert last.metadata["actor"] == f"cli:{getpass.getuser()}"
    assert (await load(db, P, run_id)).max_attempts == 4
    shown = msgspec.json.decode(
        await awooop(settings, capsys, "runs", "show", str(run_id), "--json")
    )
    assert shown["timeline"][-1]["actor"] == f"cli:{getpass.getuser()}"
