"""``awooop revisions ...`` as scripts use it: the real CLI in a subprocess, real Postgres."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from awooop.core.db import Database


def awooop(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AWOOOP_DATABASE_URL": database_url, "AWOOOP_LOG_LEVEL": "warning"}
    return subprocess.run(
        [sys.executable, "-m", "awooop.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def create(database_url: str, body: str, contract: str = "default") -> str:
    out = ok(
        awooop(
            database_url, "revisions", "create", "p1", "policy_routing", contract, "--body", body
        )
    )
    last = out.strip().splitlines()[-1]
    uuid.UUID(last)  # the LAST line is the revision id, nothing else
    return last


async def test_create_activate_list_show_rollback(database_url: str, db: Database) -> None:
    r1 = create(database_url, '{"model": "a"}')
    r2 = create(database_url, '{"model": "b"}')
    ok(awooop(database_url, "revisions", "activate", "p1", "policy_routing", "default", r1))
    out = ok(
        awooop(
            database_url,
            "revisions",
            "activate",
            "p1",
            "policy_routing",
            "default",
            r2,
            "--expected",
            r1,
        )
    )
    assert f"{r1} -> {r2}" in out
    listing = ok(awooop(database_url, "revisions", "list", "p1"))
    active_lines = [line for line in listing.splitlines() if line.startswith("*")]
    assert len(active_lines) == 1 and r2 in active_lines[0]
    as_json = json.loads(ok(awooop(database_url, "revisions", "list", "p1", "--json")))
    assert {(r["revision_id"], r["active"]) for r in as_json["revisions"]} == {
        (r1, False),
        (r2, True),
    }
    shown = json.loads(
        ok(awooop(database_url, "revisions", "show", "p1", "policy_routing", "default"))
    )
    assert (shown["revision_id"], shown["body"]) == (r2, {"model": "b"})
    back = ok(awooop(database_url, "revisions", "rollback", "p1", "policy_routing", "default"))
    assert f"{r2} -> {r1}" in back
    async with db.platform() as conn:
        assert (
            str(await conn.fetchval("SELECT active_revision_id FROM awooop_active_revisions")) == r1
        )
        assert await conn.fetchval("SELECT count(*) FROM awooop_contract_outbox") == 3


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["activate", "p1", "policy_routing", "default", str(uuid.UUID(int=1))], "E-REVISION-001"),
        (["activate", "p1", "policy_routing", "default", "not-a-uuid"], "E-INPUT-001"),
        (["create", "p1", "policy_routing", "default", "--body", "{nope"], "E-INPUT-001"),
        (["create", "p1", "policy_routing", "default", "--body", '{"model": 1}'], "E-REVISION-006"),
        (["show", "p1", "policy_routing", "default"], "E-REVISION-003"),
        (["rollback", "p1", "policy_routing", "default"], "E-REVISION-003"),
    ],
)
def test_errors_are_one_line_with_a_code(database_url: str, args: list[str], code: str) -> None:
    result = awooop(database_url, "revisions", *args)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith(f"error {code}: ")


def test_a_stale_expectation_is_refused_and_changes_nothing(database_url: str) -> None:
    r1 = create(database_url, '{"model": "a"}')
    r2 = create(database_url, '{"model": "b"}')
    ok(awooop(database_url, "revisions", "activate", "p1", "policy_routing", "default", r1))
    stale = awooop(
        database_url,
        "revisions",
        "activate",
        "p1",
        "policy_routing",
        "default",
        r2,
        "--expected",
        "none",
    )
    assert stale.returncode == 1 and stale.stderr.startswith("error E-REVISION-002")
    shown = json.loads(
        ok(awooop(database_url, "revisions", "show", "p1", "policy_routing", "default"))
    )
    assert shown["revision_id"] == r1
