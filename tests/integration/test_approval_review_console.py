"""A reviewer's reason and edited payload from the console form and the CLI, on real Postgres
and Redis: the draft shown for editing, bad JSON refused with a code and nothing written, the
handler completing with the edit."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from awooop.cli import build_parser
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import InvalidInputError
from awooop.ingest import credentials
from awooop.worker.assembly import build_worker
from tests.support import console, reviewed
from tests.support.http import app_client
from tests.support.runs import create_runs, load

P = "proj-review-ui"
EDITED = {"to": "bo@example.com", "body": "edited in the console"}


@pytest.fixture(autouse=True)
def clean() -> Iterator[None]:
    reviewed.DECISIONS.clear()
    reviewed.TICKETS.clear()
    yield
    reviewed.DECISIONS.clear()
    reviewed.TICKETS.clear()


async def run_worker(db: Database, settings: Settings) -> int:
    built = build_worker(db=db, settings=settings, handler=reviewed.reviewed, concurrency=1)
    return await built.worker.run_until_idle()


async def asking(db: Database, settings: Settings, **options: Any) -> uuid.UUID:
    [run_id] = await create_runs(db, P, payload=options)
    assert await run_worker(db, settings) == 1
    assert (await load(db, P, run_id)).status == "WAITING_APPROVAL"
    return run_id


async def open_row(db: Database, run_id: uuid.UUID) -> dict[str, Any]:
    async with db.platform() as conn:
        row = await conn.fetchrow("SELECT * FROM awooop_approvals WHERE run_id = $1", run_id)
    assert row is not None
    return dict(row.items())


async def test_the_console_form_approves_with_a_reason_and_an_edited_payload(
    settings: Settings, fast: Settings, db: Database
) -> None:
    _, manage = await credentials.create_management_token(db, P, "manage")
    run_id = await asking(db, fast)
    page_url = f"/ui/runs/{P}/{run_id}"
    async with app_client(settings, db) as http:
        await console.log_in(http, manage)
        page = await http.get(page_url)
        csrf = console.csrf_of(page)
        assert page.text.count('<textarea name="payload"') == 2  # approve and reject
        assert "ann@example.com" in page.text.split('<textarea name="payload"')[1]  # the draft
        form = {"csrf": csrf, "by": "Alice", "reason": "tone"}
        bad = await http.post(f"{page_url}/approve", data={**form, "payload": "{not json"})
        assert bad.status_code == 400 and "E-INPUT-001" in bad.text and "not valid JSON" in bad.text
        assert (await load(db, P, run_id)).status == "WAITING_APPROVAL"  # nothing written
        assert (await open_row(db, run_id))["used_at"] is None

        done = await http.post(f"{page_url}/approve", data={**form, "payload": json.dumps(EDITED)})
        assert done.status_code == 303, done.text
        shown = await http.get(page_url)
        table = shown.text.split('id="approvals"')[1]
        assert '<td class="decision-reason">tone</td>' in table and "edited in the console" in table
    assert await run_worker(db, fast) == 1
    state = await load(db, P, run_id)
    assert (state.status, state.result) == ("COMPLETED", {"sent": EDITED, "why": "tone"})
    row = await open_row(db, run_id)
    assert (row["decision_reason"], row["edited_payload"], row["decided_by"]) == (
        "tone",
        EDITED,
        "Alice",
    )


async def test_the_console_form_rejects_to_return_with_a_reason(
    settings: Settings, fast: Settings, db: Database
) -> None:
    _, manage = await credentials.create_management_token(db, P, "manage")
    run_id = await asking(db, fast, on_reject="return")
    page_url = f"/ui/runs/{P}/{run_id}"
    async with app_client(settings, db) as http:
        await console.log_in(http, manage)
        csrf = console.csrf_of(await http.get(page_url))
        form = {"csrf": csrf, "by": "Bo", "reason": "not now", "payload": ""}
        assert (await http.post(f"{page_url}/reject", data=form)).status_code == 303
    assert await run_worker(db, fast) == 1
    state = await load(db, P, run_id)
    assert (state.status, state.result) == (
        "COMPLETED",
        {"held": True, "expired": False, "why": "not now"},
    )


async def test_the_cli_approves_with_a_reason_and_a_payload_file(
    settings: Settings, fast: Settings, db: Database, tmp_path: Path
) -> None:
    run_id = await asking(db, fast)
    parser = build_parser()
    broken = tmp_path / "broken.json"
    broken.write_text("[1,", encoding="utf-8")
    for path, says in ((broken, "not valid JSON"), (tmp_path / "missing.json", "cannot read")):
        args = parser.parse_args(
            ["runs", "approve", str(run_id), "--by", "Cy", "--payload-file", str(path)]
        )
        with pytest.raises(InvalidInputError, match=says) as refused:
            await args.run(settings, args)
        assert refused.value.code == "E-INPUT-001"
    assert (await open_row(db, run_id))["used_at"] is None  # nothing written
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(EDITED), encoding="utf-8")
    args = parser.parse_args(
        [
            "runs",
            "approve",
            P,
            str(run_id),
            "--by",
            "Cy",
            "--reason",
            "ok with edits",
            "--payload-file",
            str(edited),
        ]
    )
    assert await args.run(settings, args) == 0
    assert await run_worker(db, fast) == 1
    state = await load(db, P, run_id)
    assert (state.status, state.result) == ("COMPLETED", {"sent": EDITED, "why": "ok with edits"})
