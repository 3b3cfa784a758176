"""The budget and rate-limit routes and ``awooop projects budget|rate-limit`` on real Postgres:
a project's manage token sets and ends its own project's rows only, a read token sees them,
and each change keeps the row it replaced as history."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import msgspec
import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.ingest import credentials
from tests.support.http import app_client
from tests.support.workers import cli

P, Q = "proj-a", "proj-b"


@pytest.fixture
async def client(settings: Settings, db: Database) -> AsyncIterator[httpx.AsyncClient]:
    async with app_client(settings, db) as http:
        yield http


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_a_project_token_sets_and_ends_its_own_budgets_and_limits(
    client: httpx.AsyncClient, db: Database
) -> None:
    _, mine = await credentials.create_management_token(db, P, "manage")
    _, reader = await credentials.create_management_token(db, P, "read")
    refused = await client.post(
        f"/v1/projects/{Q}/budget", json={"tokens": 10}, headers=bearer(mine)
    )
    assert (refused.status_code, refused.json()["code"]) == (403, "E-AUTH-002")
    read_only = await client.post(
        f"/v1/projects/{P}/rate-limit", json={"limit": 5}, headers=bearer(reader)
    )
    assert (read_only.status_code, read_only.json()["code"]) == (403, "E-AUTH-004")

    made = await client.post(
        f"/v1/projects/{P}/budget",
        json={"tokens": 1000, "period": "hour", "on_exceed": "fail"},
        headers=bearer(mine),
    )
    assert made.status_code == 200, made.text
    assert (made.json()["key"], made.json()["period_s"]) == (f"awooop_llm:{P}", 3600)
    again = await client.post(
        f"/v1/projects/{P}/budget", json={"tokens": 2000}, headers=bearer(mine)
    )
    assert again.status_code == 200, again.text
    limit = await client.post(
        f"/v1/projects/{P}/rate-limit",
        json={"limit": 10, "period": "1m", "burst": 2, "model": "m1"},
        headers=bearer(mine),
    )
    assert limit.status_code == 200, limit.text
    assert (limit.json()["key"], limit.json()["burst"]) == (f"awooop_llm:{P}:m1", 2)

    listed = await client.get(f"/v1/projects/{P}/budgets?history=1", headers=bearer(reader))
    assert [(b["tokens"], b["valid_to"] is None) for b in listed.json()["budgets"]] == [
        (2000, True),
        (1000, False),
    ]
    ended = await client.delete(f"/v1/projects/{P}/rate-limit?model=m1", headers=bearer(mine))
    assert ended.status_code == 200 and ended.json()["ended_by"] is not None
    missing = await client.delete(f"/v1/projects/{P}/rate-limit?model=m1", headers=bearer(mine))
    assert (missing.status_code, missing.json()["code"]) == (404, "E-BUDGET-003")
    now = await client.get(f"/v1/projects/{P}/rate-limits", headers=bearer(reader))
    assert now.json() == {"rate_limits": []}


def test_the_cli_sets_lists_and_clears(settings: Settings) -> None:
    made = cli(settings, "projects", "budget", "set", P, "--tokens", "500", "--json")
    assert made.returncode == 0, made.stderr
    assert msgspec.json.decode(made.stdout)["set_by"].startswith("cli:")
    limit = cli(settings, "projects", "rate-limit", "set", P, "--limit", "3", "--period", "2s")
    assert limit.returncode == 0, limit.stderr
    assert "3 calls per 2 s, burst 3" in limit.stdout
    listed = cli(settings, "projects", "budget", "list", "--project", P, "--json")
    assert [b["tokens"] for b in msgspec.json.decode(listed.stdout)] == [500]
    assert cli(settings, "projects", "budget", "clear", P).returncode == 0
    again = cli(settings, "projects", "budget", "clear", P)
    assert again.returncode == 1 and "E-BUDGET-003" in again.stderr
    bad = cli(settings, "projects", "budget", "set", P, "--tokens", "5", "--period", "fortnight")
    assert bad.returncode != 0 and "period" in bad.stderr


async def test_prices_and_cost_budgets_through_the_routes(
    client: httpx.AsyncClient, db: Database
) -> None:
    _, mine = await credentials.create_management_token(db, P, "manage")
    _, reader = await credentials.create_management_token(db, P, "read")
    # A budget in cost of a model without a price: 409 E-BUDGET-004, nothing written.
    unpriced = await client.post(
        f"/v1/projects/{P}/budget", json={"cost": 500, "model": "m1"}, headers=bearer(mine)
    )
    assert (unpriced.status_code, unpriced.json()["code"]) == (409, "E-BUDGET-004")
    both = await client.post(
        f"/v1/projects/{P}/budget", json={"cost": 500, "tokens": 5}, headers=bearer(mine)
    )
    assert both.status_code == 400
    bad = await client.post(
        f"/v1/projects/{P}/price",
        json={"model": "m1", "input": -1, "output": 2},
        headers=bearer(mine),
    )
    assert bad.status_code == 400
    made = await client.post(
        f"/v1/projects/{P}/price",
        json={"model": "m1", "input": 2.5, "output": "10"},
        headers=bearer(mine),
    )
    assert made.status_code == 200, made.text
    assert (made.json()["input_price"], made.json()["output_price"]) == (2.5, 10.0)
    budget = await client.post(
        f"/v1/projects/{P}/budget", json={"cost": 500, "model": "m1"}, headers=bearer(mine)
    )
    assert budget.status_code == 200, budget.text
    assert (budget.json()["unit"], budget.json()["cost"]) == ("cost", 500)
    listed = await client.get(f"/v1/projects/{P}/budgets", headers=bearer(reader))
    assert [(b["unit"], b["cost"]) for b in listed.json()["budgets"]] == [("cost", 500)]
    await client.post(
        f"/v1/projects/{P}/price",
        json={"model": "m1", "input": 3, "output": 10},
        headers=bearer(mine),
    )
    prices = await client.get(f"/v1/projects/{P}/prices?history=1", headers=bearer(reader))
    assert [(p["input_price"], p["valid_to"] is None) for p in prices.json()["prices"]] == [
        (3.0, True),
        (2.5, False),
    ]
    ended = await client.delete(f"/v1/projects/{P}/price?model=m1", headers=bearer(mine))
    assert ended.status_code == 200 and ended.json()["ended_by"] is not None
    missing = await client.delete(f"/v1/projects/{P}/price?model=m1", headers=bearer(mine))
    assert (missing.status_code, missing.json()["code"]) == (404, "E-BUDGET-003")


def test_the_cli_sets_prices_and_cost_budgets(settings: Settings) -> None:
    unpriced = cli(settings, "projects", "budget", "set", P, "--cost", "50", "--model", "m1")
    assert unpriced.returncode == 1 and "E-BUDGET-004" in unpriced.stderr
    price = cli(
        settings,
        "projects",
        "price",
        "set",
        P,
        "--model",
        "m1",
        "--input",
        "0.15",
        "--output",
        "0.6",
    )
    assert price.returncode == 0, price.stderr
    assert "0.15 in, 0.6 out per 1,000 tokens" in price.stdout
    made = cli(settings, "projects", "budget", "set", P, "--cost", "50", "--model", "m1")
    assert made.returncode == 0, made.stderr
    assert "50 credits per 86400 s" in made.stdout
    tokens = cli(settings, "projects", "budget", "set", P, "--tokens", "500")
    assert tokens.returncode == 0 and "500 tokens per 86400 s" in tokens.stdout
    listed = cli(settings, "projects", "budget", "list", "--project", P)
    assert "50 credits" in listed.stdout and "500 tokens" in listed.stdout
    prices = cli(settings, "projects", "price", "list", "--project", P, "--json")
    assert [p["input_price"] for p in msgspec.json.decode(prices.stdout)] == [0.15]
    neither = cli(settings, "projects", "budget", "set", P)
    assert neither.returncode != 0 and "--tokens" in neither.stderr
    assert cli(settings, "projects", "price", "clear", P, "--model", "m1").returncode == 0
