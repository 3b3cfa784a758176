"""The flow rules of a model call (rate limits, budgets and the model's price in force), read
with one query."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from decimal import Decimal
from typing import Any

import msgspec

from awooop.core.db import Connection, Database
from awooop.eventlog import queries
from awooop.llm.flow_rules import Budget, BudgetUnit, OnExceed

RULES = queries.load("llm_rules")


class Rules(msgspec.Struct, frozen=True):
    """The rules in force for calls of one project to one model."""

    budgets: list[Budget]
    limits: list[tuple[uuid.UUID, str]]  # (limit id, model scope)
    price: tuple[Decimal, Decimal] | None  # credits per 1,000 input, output tokens

    @property
    def empty(self) -> bool:
        return not self.budgets and not self.limits


Fetch = Callable[[Callable[[Connection], Awaitable[Any]]], Awaitable[Any]]


def rules_of(project_id: str, rows: list[Any]) -> Rules:
    """Pure: the rules of the rows of ``llm_rules.sql``."""
    budgets = [_budget(project_id, r) for r in rows if r["kind"] == "budget"]
    limits = [(r["id"], r["model"]) for r in rows if r["kind"] == "limit"]
    price = next(
        ((r["input_price"], r["output_price"]) for r in rows if r["kind"] == "price"), None
    )
    return Rules(budgets, limits, price)


async def read(
    db: Database, tx: Fetch, project_id: str, model: str, *, fresh: bool = False
) -> tuple[Rules, bool]:
    """The rules of ``project_id``'s calls to ``model`` (and False: not from a cache)."""
    rows = await tx(lambda conn: conn.fetch(RULES, project_id, model))
    return rules_of(project_id, rows), False


def _budget(project_id: str, row: Any) -> Budget:
    unit = BudgetUnit(row["unit"])
    return Budget(
        budget_id=row["id"],
        project_id=project_id,
        model=row["model"],
        tokens=row["amount"] if unit is BudgetUnit.TOKENS else 0,
        cost=row["amount"] if unit is BudgetUnit.COST else None,
        unit=unit,
        period_s=int(row["period_s"]),
        reserve_tokens=row["reserve_tokens"],
        on_exceed=OnExceed(row["on_exceed"]),
        set_by="",
        valid_from=datetime.min,
    )
