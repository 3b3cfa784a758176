"""One meaning for ``since`` (created since) in the console, ``--filter`` and ``runs list``;
the console's small page rules, as the server renders them."""

from __future__ import annotations

import msgspec
import pytest

from awooop.cli import build_parser
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.ingest import credentials
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
