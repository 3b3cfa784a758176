"""One meaning for ``since`` (created since) in the console, ``--filter`` and ``runs list``;
the console's small page rules, as the server renders them."""

from __future__ import annotations

import asyncio
import re
import uuid

import msgspec
import pytest

from awooop.cli import build_parser
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import DeliveryLimitError
from awooop.ingest import credentials
from awooop.runs import leases
from tests.support import console
from tests.support.http import app_client
from tests.support.runs import create_runs

P = "proj-console-defects"
AGE = "UPDATE awooop_run_state SET created_at = now() - interval '3 hours' WHERE run_id = $1"
TOUCH = "UPDATE awooop_run_state SET updated_at = now() WHERE run_id = $1"


async def awooop(settings: Settings, capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    args = build_parser().parse_args(list(argv))
    assert await args.run(settings, args) == 0
    out: str = capsys.readouterr().out
    return out


async def test_since_means_created_since_in_the_console_the_filter_and_runs_list(
    settings: Settings, db: Database, capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = await create_runs(db, P, 2)
    async with db.tenant(P) as conn:
        await conn.execute(AGE, old)
        await conn.execute(TOUCH, old)  # changed just now, created 3 hours ago
    listed = msgspec.json.decode(
        await awooop(settings, capsys, "runs", "list", "--project", P, "--since", "1h", "--json")
    )
    assert [r["run_id"] for r in listed] == [str(new)]

    preview = await awooop(
        settings,
        capsys,
        "runs",
        "cancel",
        "--filter",
        f"project={P}",
        "--filter",
        "since=1h",
        "--dry-run",
    )
    assert "1 run(s) to cancel" in preview

    _, token = await credentials.create_management_token(db, P, "manage")
    async with app_client(settings, db) as http:
        await console.log_in(http, token)
        page = (await http.get("/ui/runs", params={"since": "1h"})).text
        assert str(new) in page and str(old) not in page
        assert "created since" in page
        bad = await http.get("/ui/runs", params={"since": "yesterday"})
        assert bad.status_code == 400 and "E-INPUT-001" in bad.text
        assert "--since" not in bad.text and "since &#39;yesterday&#39;" in bad.text
    with pytest.raises(SystemExit):
        build_parser().parse_args(["runs", "list", "--help"])
    assert "created since" in capsys.readouterr().out


async def failed_run(db: Database) -> uuid.UUID:
    [run_id] = await create_runs(db, P)
    assert await db.in_tenant(P, lambda c: leases.claim(c, run_id, "host:1:w1", 0.01))
    await asyncio.sleep(0.05)  # the lease runs out: the run may be failed undeliverable
    failed = await db.in_tenant(
        P,
        lambda c: leases.fail_undeliverable(
            c, run_id, "host:1:w2", "delivered too often", DeliveryLimitError.code
        ),
    )
    assert failed is not None
    return run_id


async def test_pages_fit_a_phone_have_a_heading_label_utc_and_explain_counts(
    settings: Settings, db: Database
) -> None:
    _, empty_token = await credentials.create_management_token(db, "proj-console-empty", "read")
    _, token = await credentials.create_management_token(db, P, "manage")
    failed = await failed_run(db)
    async with db.tenant(P) as conn:  # two claims past its limit (the data an operator saw)
        await conn.execute(
            "UPDATE awooop_run_state SET attempt_count = 5 WHERE run_id = $1", failed
        )
    async with app_client(settings, db) as http:
        await console.log_in(http, empty_token)
        empty = (await http.get("/ui/runs")).text
        assert 'id="empty"' in empty and "/v1/projects/proj-console-empty/channels/api" in empty
        assert "docs/reference.md" in empty
        filtered = (await http.get("/ui/runs", params={"status": "FAILED"})).text
        assert "No run matches." in filtered and "channels/api" not in filtered

        await console.log_in(http, token)
        pages = {
            "list": await http.get("/ui/runs"),
            "run": await http.get(f"/ui/runs/{P}/{failed}"),
            "bulk": await http.get("/ui/bulk/retry", params={"status": "FAILED"}),
            "error": await http.get(f"/ui/runs/{P}/{uuid.uuid4()}"),
        }
        await http.post("/ui/logout", data={"csrf": console.csrf_of(pages["list"])})
        pages["login"] = await http.get("/ui/login")
        for name, page in pages.items():
            assert '<meta name="viewport" content="width=device-width' in page.text, name
            assert page.text.count("<h1") == 1, name
        run = pages["run"].text
        assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", run)
        assert re.search(r"\d\d:\d\d:\d\d(?! UTC)<", run) is None  # no unlabelled time
        assert "5 of 3 (+2)" in run and "2 claim(s) past the limit of 3" in run
        assert re.search(r'class="deliveries">-<', run)


async def test_an_action_notice_shows_once_and_error_pages_link_back(
    settings: Settings, db: Database
) -> None:
    _, token = await credentials.create_management_token(db, P, "manage")
    failed = await failed_run(db)
    async with app_client(settings, db) as http:
        await console.log_in(http, token)
        csrf = console.csrf_of(await http.get("/ui/runs"))
        done = await http.post(f"/ui/runs/{P}/{failed}/retry", data={"csrf": csrf})
        assert done.status_code == 303
        assert done.headers["location"] == f"/ui/runs/{P}/{failed}"  # no ?done= in the URL
        first = await http.get(done.headers["location"])
        assert 'id="done"' in first.text and "retry: the run is PENDING" in first.text
        again = await http.get(done.headers["location"])
        assert 'id="done"' not in again.text  # shown once: a reload does not repeat it

        came = f"http://test/ui/runs?status=FAILED&project={P}"
        missing = await http.get(f"/ui/runs/{P}/{uuid.uuid4()}", headers={"referer": came})
        assert missing.status_code == 404
        assert f'id="back" href="/ui/runs?status=FAILED&amp;project={P}"' in missing.text
        elsewhere = await http.get(
            f"/ui/runs/{P}/{uuid.uuid4()}", headers={"referer": "https://evil.example/ui/runs"}
        )
        assert 'id="back" href="/ui/runs"' in elsewhere.text
        refused = await http.post(
            f"/ui/runs/{P}/{failed}/cancel",
            data={"csrf": "x" * 43},
            headers={"referer": f"http://test/ui/runs/{P}/{failed}"},
        )
        assert refused.status_code == 403
        assert f'id="back" href="/ui/runs/{P}/{failed}"' in refused.text
