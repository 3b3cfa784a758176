"""Searching runs (awooop/runs/search.py, migration 0128) on real Postgres: id and key
prefixes, text in input, result and failure reason, with the list's other filters and its
pages, in the console, the CLI and the management API; tenant isolation, also through
awooop_search_runs() called directly; bad input refused; bulk previews that list the runs and
their failure codes, and a bulk retry that leaves out the runs of an excluded code."""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from awooop.cli import build_parser
from awooop.core.config import Settings
from awooop.core.db import Connection, Database
from awooop.core.errors import InvalidInputError
from awooop.core.events import RunCreated, RunFailed
from awooop.core.migrate import migrate
from awooop.eventlog.run_reads import LOCK_MANY
from awooop.eventlog.runs import apply_and_store_many, create_run
from awooop.eventlog.state import row_to_state
from awooop.ingest import credentials
from awooop.projections.registry import get
from awooop.projections.replay import replay
from awooop.runs import bulk, listing, search
from tests.integration.test_console import log_in
from tests.support.console import csrf_of
from tests.support.http import app_client
from tests.support.runs import load
from tests.support.waiting import eventually

A, B = "alpha", "beta"
COLUMNS = (
    "run_id, project_id, channel_type, provider_event_id, status, version, attempt_count, "
    "max_attempts, failure_reason, failure_code, input, result, created_at, updated_at"
)


async def seed(database_url: str, rows: list[dict[str, Any]]) -> None:
    """Run rows as their writers leave them (as the table's owner: this is the fixture)."""
    conn = await asyncpg.connect(database_url)
    try:
        now = datetime.now(UTC)
        for i, r in enumerate(rows):
            failed = r.get("status") == "FAILED"
            await conn.execute(
                f"INSERT INTO awooop_run_state ({COLUMNS}) VALUES "
                "($1, $2, $3, $4, $5, 2, 1, 3, $6, $7, $8::jsonb, $9::jsonb, $10, $10)",
                r.get("run_id", uuid.uuid4()),
                r.get("project", A),
                r.get("channel", "api"),
                r.get("key", f"key-{uuid.uuid4().hex}"),
                r.get("status", "COMPLETED"),
                r.get("reason") if failed else None,
                r.get("code", "E-HANDLER-001") if failed else None,
                json.dumps(r.get("input", {"text": "nothing to see"})),
                None if r.get("result") is None else json.dumps(r["result"]),
                now - timedelta(seconds=i),
            )
        await conn.execute("ANALYZE awooop_run_state")
    finally:
        await conn.close()


async def never(_conn: Connection, _ids: list[uuid.UUID]) -> dict[uuid.UUID, Any]:
    return {}


async def found_ids(db: Database, project: str | None, fields: dict[str, str]) -> set[uuid.UUID]:
    f = listing.parse_filter({**fields, **({"project": project} if project else {})}, NOW())
    run = (lambda fn: db.in_tenant(project, fn)) if project else db.in_platform
    page = await run(lambda conn: listing.page(conn, f, never, size=200))
    return {row.run_id for row, _ in page.rows}


def NOW() -> datetime:
    return datetime.now(UTC)


async def test_prefixes_and_text_in_input_result_and_error_with_filters(
    database_url: str, db: Database
) -> None:
    by_id = uuid.UUID("abcdef12-0000-4000-8000-000000000001")
    rows = {
        "id": {"run_id": by_id},
        "key": {"key": "tg-update-777-x"},
        "input": {"input": {"text": "Please restart the Zebra cluster"}},
        "result": {"result": {"answer": "zebra restarted"}, "channel": "telegram"},
        "error": {"status": "FAILED", "reason": "the zebra handler raised", "channel": "gitea"},
        "wild": {"input": {"text": "100% done_ok"}},
        "other": {"input": {"text": "zebra"}, "project": B, "key": "tg-update-777-y"},
    }
    ids: dict[str, uuid.UUID] = {}
    for name, row in rows.items():
        row.setdefault("run_id", uuid.uuid4())
        ids[name] = row["run_id"]
    await seed(database_url, list(rows.values()) + [{} for _ in range(30)])

    assert await found_ids(db, A, {"search": "abcdef1"}) == {ids["id"]}
    assert await found_ids(db, A, {"search": "ABCD-EF12"}) == {ids["id"]}
    assert await found_ids(db, A, {"search": "tg-update-77"}) == {ids["key"]}
    zebra = await found_ids(db, A, {"search": "zEbRa"})
    assert zebra == {ids["input"], ids["result"], ids["error"]}
    assert await found_ids(db, A, {"search": "zebra", "status": "FAILED"}) == {ids["error"]}
    assert await found_ids(db, A, {"search": "zebra", "channel": "telegram"}) == {ids["result"]}
    # LIKE wildcards in the term are literal characters
    assert await found_ids(db, A, {"search": "0% done_"}) == {ids["wild"]}
    assert await found_ids(db, A, {"search": "0%_done"}) == set()
    # an admin across projects finds both; a project's list never the other's
    everywhere = await found_ids(db, None, {"search": "zebra"})
    assert everywhere == zebra | {ids["other"]}
    assert await found_ids(db, B, {"search": "tg-update-77"}) == {ids["other"]}


STATUSES = (
    "PENDING", "RUNNING", "WAITING_TOOL", "WAITING_APPROVAL", "WAITING_EVENT", "RESUMED",
    "COMPLETED", "FAILED", "CANCELLED",
)  # fmt: skip


async def test_text_is_found_in_every_status_the_leased_ones_read_from_their_rows(
    database_url: str, db: Database
) -> None:
    """The trigram index leaves out the leased runs (RUNNING, WAITING_TOOL: migration 0160),
    whose text the function reads from the rows: a run is found by its text whatever its
    status, as its status changes, within its tenant only, and the status filter still counts."""
    rows = [
        {"status": s, "input": {"text": f"walrus {s.lower()}"}, "reason": "walrus down"}
        for s in STATUSES
    ]
    rows.append({"status": "RUNNING", "input": {"text": "walrus elsewhere"}, "project": B})
    for row in rows:
        row["run_id"] = uuid.uuid4()
    await seed(database_url, rows + [{} for _ in range(30)])
    mine = {r["run_id"]: r["status"] for r in rows if r.get("project", A) == A}
    assert await found_ids(db, A, {"search": "walrus"}) == set(mine)
    assert await found_ids(db, B, {"search": "walrus"}) == {rows[-1]["run_id"]}
    assert await found_ids(db, None, {"search": "walrus"}) == {r["run_id"] for r in rows}
    for status in STATUSES:
        found = await found_ids(db, A, {"search": f"walrus {status.lower()}"})
        assert found == {i for i, s in mine.items() if s == status}, status
        assert await found_ids(db, A, {"search": "walrus", "status": status}) == found, status
    # a run claimed, released and finished is found at every step
    [pending] = [i for i, s in mine.items() if s == "PENDING"]
    owner = await asyncpg.connect(database_url)
    try:
        for status in ("RUNNING", "WAITING_TOOL", "RUNNING", "COMPLETED"):
            await owner.execute(
                "UPDATE awooop_run_state SET status = $2 WHERE run_id = $1", pending, status
            )
            assert pending in await found_ids(db, A, {"search": "walrus pending"}), status
    finally:
        await owner.close()


async def test_pages_of_a_search_go_newest_first_without_repeats(
    database_url: str, db: Database
) -> None:
    await seed(database_url, [{"input": {"text": f"needle {i}"}} for i in range(25)] + [{}] * 10)
    f = listing.parse_filter({"project": A, "search": "needle"}, NOW())
    seen: list[uuid.UUID] = []
    before = None
    while True:
        page = await db.in_tenant(
            A, lambda conn, before=before: listing.page(conn, f, never, before=before, size=10)
        )
        seen += [row.run_id for row, _ in page.rows]
        created = [row.created_at for row, _ in page.rows]
        assert created == sorted(created, reverse=True)
        if page.next is None:
            break
        before = page.next
    assert len(seen) == 25 == len(set(seen))


async def test_the_function_called_directly_never_crosses_the_tenant(
    database_url: str, db: Database
) -> None:
    await seed(
        database_url,
        [{"input": {"text": "secret plan"}, "project": B}, {"input": {"text": "secret ok"}}],
    )
    pattern = search.classify("secret").pattern

    async def direct(conn: Connection, project: str | None) -> int:
        return len(await conn.fetch(search.BY_TEXT, project, pattern, 100, None))

    async with db.tenant(A) as conn:
        assert await conn.fetchval("SELECT current_user") == "awooop_app"
        assert await direct(conn, B) == 0  # another project's id: nothing
        assert await direct(conn, None) == 1  # the whole scope: its own project
        assert await direct(conn, A) == 1
        await conn.execute("SELECT set_config('awooop.project_id', '', true)")
        assert await direct(conn, None) == 0  # no tenant set: nothing, as the policy
    async with db.platform() as conn:
        assert await direct(conn, None) == 2
        assert await direct(conn, B) == 1


async def test_bad_input_is_refused_with_a_code_and_writes_nothing(
    settings: Settings, db: Database, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(InvalidInputError):
        listing.parse_filter({"search": "ab"}, NOW())
    _, token = await credentials.create_management_token(db, A, "manage")
    async with app_client(settings, db) as http:
        await log_in(http, token)
        page = await http.get("/ui/runs", params={"search": "ab"})
        assert "E-INPUT-001" in page.text
        api = await http.get(
            f"/v1/projects/{A}/runs",
            params={"search": "x"},
            headers={"authorization": f"Bearer {token}"},
        )
        assert api.status_code == 400 and api.json()["code"] == "E-INPUT-001"
        preview = await http.get("/ui/bulk/retry", params={"exclude_codes": "no good"})
        assert "E-INPUT-001" in preview.text
    args = build_parser().parse_args(["runs", "retry", "--filter", "search=ab"])
    with pytest.raises(InvalidInputError):  # the CLI prints it as "error E-INPUT-001: ..."
        await args.run(settings, args)
    async with db.platform() as conn:
        assert await conn.fetchval("SELECT count(*) FROM awooop_operations") == 0


async def test_console_cli_and_api_search_together_with_the_filters(
    settings: Settings, db: Database, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    hit, miss = uuid.uuid4(), uuid.uuid4()
    await seed(
        database_url,
        [
            {"run_id": hit, "input": {"text": "walrus"}, "status": "FAILED", "reason": "x"},
            {"run_id": miss, "input": {"text": "walrus"}},
            {"input": {"text": "walrus"}, "project": B},
        ],
    )
    _, token = await credentials.create_management_token(db, A, "read")
    async with app_client(settings, db) as http:
        await log_in(http, token)
        page = await http.get("/ui/runs", params={"search": "walrus", "status": "FAILED"})
        assert str(hit) in page.text and str(miss) not in page.text
        assert 'name="search" value="walrus"' in page.text
    _, manage = await credentials.create_management_token(db, A, "manage")
    async with app_client(settings, db, bearer=manage) as http:
        answer = await http.get(f"/v1/projects/{A}/runs", params={"search": "walrus"})
        assert answer.status_code == 200, answer.text
        assert {r["run_id"] for r in answer.json()["runs"]} == {str(hit), str(miss)}
        other = await http.get(f"/v1/projects/{B}/runs", params={"search": "walrus"})
        assert other.status_code == 403
    args = build_parser().parse_args(["runs", "list", "--search", "walrus", "--project", A])
    assert await args.run(settings, args) == 0
    out = capsys.readouterr().out
    assert str(hit)[:8] in out and str(miss)[:8] in out


async def fail_with(db: Database, project: str, codes: list[str]) -> list[uuid.UUID]:
    """One FAILED run per code, created and failed as the runtime does."""
    run_ids = [uuid.uuid4() for _ in codes]
    async with db.tenant(project) as conn:
        now = await conn.fetchval("SELECT now()")
        for run_id in run_ids:
            await create_run(
                conn,
                RunCreated(
                    at=now,
                    run_id=run_id,
                    project_id=project,
                    channel_type="api",
                    provider_event_id=str(run_id),
                    input={"text": "hello"},
                    max_attempts=3,
                ),
            )
    async with db.tenant(project) as conn:
        rows = {r["run_id"]: r for r in await conn.fetch(LOCK_MANY, run_ids)}
        await apply_and_store_many(
            conn,
            [
                (row_to_state(rows[r]), RunFailed(at=rows[r]["db_now"], reason="boom", code=c))
                for r, c in zip(run_ids, codes, strict=True)
            ],
        )
    return run_ids


async def test_the_preview_lists_runs_and_codes_and_an_excluded_code_stays_failed(
    settings: Settings, db: Database
) -> None:
    ok1, ok2, killer = await fail_with(db, A, ["E-HANDLER-001", "E-HANDLER-001", "E-RUN-004"])
    _, token = await credentials.create_management_token(db, A, "manage")
    async with app_client(settings, db) as http:
        await log_in(http, token)
        preview = await http.get("/ui/bulk/retry", params={"status": "FAILED"})
        assert re.search(r'id="total">3<', preview.text)
        for run_id in (ok1, ok2, killer):
            assert str(run_id) in preview.text
        assert re.search(r"E-RUN-004</td><td>1<", preview.text)
        assert re.search(r"E-HANDLER-001</td><td>2<", preview.text)
        without = await http.get(
            "/ui/bulk/retry", params={"status": "FAILED", "exclude_codes": "E-RUN-004"}
        )
        assert re.search(r'id="total">2<', without.text) and str(killer) not in without.text
        assert 'name="exclude_codes" value="E-RUN-004"' in without.text
        ticked = await http.get(  # two ticked checkboxes: the parameter twice
            "/ui/bulk/retry?status=FAILED&exclude_codes=E-RUN-004&exclude_codes=E-HANDLER-001"
        )
        assert re.search(r'id="total">0<', ticked.text), ticked.text
        confirmed = await http.post(
            "/ui/bulk/retry",
            data={
                "csrf": csrf_of(without),
                "status": "FAILED",
                "exclude_codes": "E-RUN-004",
                "attempts": "2",
            },
        )
        assert confirmed.status_code == 303

        async def done() -> bool:
            async with db.platform() as conn:
                return bool(await conn.fetchval("SELECT state = 'done' FROM awooop_operations"))

        await eventually(done, what="the bulk retry is done")
    async with db.platform() as conn:
        stored = await conn.fetchval("SELECT filter FROM awooop_operations")
    assert stored["exclude_codes"] == ["E-RUN-004"]
    ops = await db.in_tenant(A, lambda conn: bulk.recent(conn, A))
    assert ops[0].run_filter().exclude_codes == ("E-RUN-004",)  # a resume reads it back
    assert (await load(db, A, killer)).status.value == "FAILED"
    assert (await load(db, A, ok1)).status.value == "PENDING"
    assert (await load(db, A, ok2)).status.value == "PENDING"


async def test_a_search_past_its_limit_says_so_and_no_operation_is_recorded_for_it(
    settings: Settings, db: Database, database_url: str
) -> None:
    many = search.LIMIT + 5
    await seed(
        database_url,
        [{"input": {"text": "grape"}, "status": "FAILED", "reason": "x"}] * many,
    )
    page = await db.in_tenant(
        A,
        lambda conn: listing.page(
            conn, listing.parse_filter({"project": A, "search": "grape"}, NOW()), never
        ),
    )
    assert page.capped and len(page.rows) == listing.PAGE
    _, token = await credentials.create_management_token(db, A, "manage")
    async with app_client(settings, db) as http:
        await log_in(http, token)
        preview = await http.get("/ui/bulk/retry", params={"search": "grape"})
        assert 'id="capped"' in preview.text and 'id="confirm"' not in preview.text
        refused = await http.post(
            "/ui/bulk/retry", data={"csrf": csrf_of(preview), "search": "grape"}
        )
        assert "E-INPUT-001" in refused.text
    async with db.platform() as conn:
        assert await conn.fetchval("SELECT count(*) FROM awooop_operations") == 0
        assert (
            await conn.fetchval("SELECT count(*) FROM awooop_run_state WHERE status = 'FAILED'")
            == many
        )


async def test_search_works_the_same_after_a_replay_swaps_the_run_table(
    db: Database, database_url: str
) -> None:
    """`awooop replay` rebuilds awooop_run_state and swaps it in: the search's indexes come
    along (the swap recreates every index) and the function finds the table by name."""
    [run_id] = await fail_with(db, A, ["E-HANDLER-001"])
    [elsewhere] = await fail_with(db, B, ["E-HANDLER-001"])
    term = {"search": "boom"}  # the failure reason
    assert await found_ids(db, A, term) == {run_id}
    report = await replay(database_url, get("run_state"), swap=True)
    assert report.swapped
    owner = await asyncpg.connect(database_url)
    try:
        indexes = await owner.fetch(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'awooop_run_state'"
        )
    finally:
        await owner.close()
    names = {r["indexname"] for r in indexes}
    assert {"awooop_run_state_search_settled_idx", "awooop_run_state_key_pattern_idx"} <= names
    assert await found_ids(db, A, term) == {run_id}
    assert await found_ids(db, None, term) == {run_id, elsewhere}
    assert await found_ids(db, A, {"search": str(run_id)[:8]}) == {run_id}


async def test_0128_and_0160_build_online_on_a_table_with_runs_and_can_run_again(
    database_url: str, db: Database
) -> None:
    """Undo 0128 and 0160 on a database with runs, then `awooop migrate`: the online runner
    builds 0128's indexes CONCURRENTLY and creates the function, then 0160 builds the index of
    the runs not leased, replaces the function and drops 0128's trigram index; the search works
    as before."""
    names = ["0128_run_search.sql", "0160_search_index_skips_leased_runs.sql"]
    await seed(database_url, [{"input": {"text": f"otter {i}"}} for i in range(200)])
    owner = await asyncpg.connect(database_url)
    try:
        await owner.execute(
            "DROP FUNCTION awooop_search_runs(text, text[], text, integer);"
            "DROP INDEX awooop_run_state_search_settled_idx;"
            "DROP INDEX awooop_run_state_key_pattern_idx;"
        )
        await owner.execute(
            "DELETE FROM awooop_schema_migrations WHERE name = ANY($1::text[])", names
        )
        assert await migrate(database_url) == names
        valid = await owner.fetch(
            "SELECT c.relname, x.indisvalid FROM pg_index x JOIN pg_class c "
            "ON c.oid = x.indexrelid WHERE c.relname LIKE 'awooop_run_state_%' "
            "AND (c.relname LIKE '%search%' OR c.relname LIKE '%key_pattern%')"
        )
        assert sorted(tuple(r) for r in valid) == [
            ("awooop_run_state_key_pattern_idx", True),
            ("awooop_run_state_search_settled_idx", True),
        ]
        assert await migrate(database_url) == []
    finally:
        await owner.close()
    assert len(await found_ids(db, A, {"search": "otter"})) == 200
