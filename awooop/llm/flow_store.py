"""The rows of rate limits, budgets and prices (migrations 0133, 0136): set, end, list them.

Configuration with history: setting a limit, a budget or a price ends the row in force
(``valid_to``, ``ended_by``) and inserts its successor in one statement; ending one sets
``valid_to``. No row is deleted, so what was enforced at any time can be read back. Run state
does not depend on them: a run's events (``ModelCalled`` with its outcome and token counts)
are what replay folds, so a replayed ``run_state`` agrees with what was enforced whatever the
rows say now.

Each function runs on a connection in a tenant transaction of the project (row-level
security: a project's token neither sees nor changes another's) or on the platform role.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal
from typing import Any

import msgspec

from awooop.core.db import Connection
from awooop.core.errors import LimitNotFoundError, PriceNotFoundError
from awooop.core.logs import get_logger
from awooop.eventlog import queries
from awooop.llm import flow_cache
from awooop.llm.flow_rules import (
    Budget,
    BudgetUnit,
    OnExceed,
    Price,
    RateLimit,
    WaitReason,
    check_budget,
    check_limit,
    check_price,
    key_text,
)
from awooop.runs.pause_rules import MAX_ACTOR, check_text

log = get_logger(__name__)

LIMIT_SET = queries.load("llm_limit_set")
LIMIT_END = queries.load("llm_limit_end")
LIMIT_LIST = queries.load("llm_limit_list")
BUDGET_SET = queries.load("llm_budget_set")
BUDGET_END = queries.load("llm_budget_end")
BUDGET_LIST = queries.load("llm_budget_list")
PRICE_SET = queries.load("llm_price_set")
PRICE_END = queries.load("llm_price_end")
PRICE_LIST = queries.load("llm_price_list")
WAIT_COUNTS = queries.load("llm_wait_counts")
WAIT_FIRST = queries.load("llm_wait_first")


class WaitCount(msgspec.Struct, frozen=True, kw_only=True):
    """How many runs of a project wait now for one limit's or budget's key, and since when."""

    reason: WaitReason
    wait_key: str
    runs: int
    oldest: datetime


class Waiting(msgspec.Struct, frozen=True, kw_only=True):
    """A run whose current attempt waits now for a model call's token or budget."""

    run_id: uuid.UUID
    reason: WaitReason
    wait_key: str
    detail: str
    since: datetime
    until: datetime


def _limit(row: Any) -> RateLimit:
    return msgspec.convert(dict(row), RateLimit)


def _budget(row: Any) -> Budget:
    return msgspec.convert(dict(row), Budget)


def _price(row: Any) -> Price:
    return msgspec.convert(dict(row), Price)


async def set_limit(
    conn: Connection,
    project_id: str,
    model: str,
    *,
    limit: int,
    period_s: float,
    burst: int | None,
    actor: str,
) -> RateLimit:
    check_text("actor", actor, MAX_ACTOR, empty=False)
    burst = check_limit(limit, period_s, burst)
    flow_cache.changed()
    row = await conn.fetchrow(LIMIT_SET, project_id, model, limit, period_s, burst, actor)
    made = _limit(row)
    log.info(
        "llm_rate_limit_set",
        key=key_text(project_id, model),
        limit=limit,
        period_s=period_s,
        burst=burst,
        actor=actor,
    )
    return made


async def end_limit(conn: Connection, project_id: str, model: str, *, actor: str) -> RateLimit:
    check_text("actor", actor, MAX_ACTOR, empty=False)
    flow_cache.changed()
    row = await conn.fetchrow(LIMIT_END, project_id, model, actor)
    if row is None:
        raise LimitNotFoundError(
            f"no rate limit of {key_text(project_id, model)} is in force", project_id=project_id
        )
    log.info("llm_rate_limit_ended", key=key_text(project_id, model), actor=actor)
    return _limit(row)


async def limits(
    conn: Connection, project_id: str | None, *, history: bool = False, limit: int = 1000
) -> list[RateLimit]:
    return [_limit(row) for row in await conn.fetch(LIMIT_LIST, project_id, history, limit)]


async def set_budget(
    conn: Connection,
    project_id: str,
    model: str,
    *,
    tokens: int | None = None,
    cost: int | None = None,
    period_s: int,
    reserve_tokens: int,
    on_exceed: OnExceed,
    actor: str,
) -> Budget:
    """Set the budget of ``model`` ('' every model): ``tokens`` or ``cost`` credits per period.
    A cost budget of one model needs that model's price (else E-BUDGET-004, nothing written);
    a project-wide one refuses, call by call, the calls to a model without a price."""
    check_text("actor", actor, MAX_ACTOR, empty=False)
    unit, amount = check_budget(tokens, reserve_tokens, cost)
    if unit is BudgetUnit.COST and model and not await prices(conn, project_id, model=model):
        raise PriceNotFoundError(
            f"{key_text(project_id, model)} has no price: set one (awooop projects price set) "
            "before a budget in cost",
            project_id=project_id,
        )
    flow_cache.changed()
    row = await conn.fetchrow(
        BUDGET_SET,
        project_id,
        model,
        amount if unit is BudgetUnit.TOKENS else 0,
        period_s,
        reserve_tokens,
        on_exceed.value,
        actor,
        unit.value,
        amount if unit is BudgetUnit.COST else None,
    )
    log.info(
        "llm_budget_set",
        key=key_text(project_id, model),
        amount=amount,
        unit=unit.value,
        period_s=period_s,
        on_exceed=on_exceed.value,
        actor=actor,
    )
    return _budget(row)


async def end_budget(conn: Connection, project_id: str, model: str, *, actor: str) -> Budget:
    check_text("actor", actor, MAX_ACTOR, empty=False)
    flow_cache.changed()
    row = await conn.fetchrow(BUDGET_END, project_id, model, actor)
    if row is None:
        raise LimitNotFoundError(
            f"no budget of {key_text(project_id, model)} is in force", project_id=project_id
        )
    log.info("llm_budget_ended", key=key_text(project_id, model), actor=actor)
    return _budget(row)


async def budgets(
    conn: Connection, project_id: str | None, *, history: bool = False, limit: int = 1000
) -> list[Budget]:
    """The budgets (with their current period's usage), newest first."""
    return [_budget(row) for row in await conn.fetch(BUDGET_LIST, project_id, history, limit)]


async def waits(
    conn: Connection, project_id: str, first: int
) -> tuple[list[WaitCount], list[Waiting]]:
    """The runs of ``project_id`` waiting now for a model call: how many per reason and key,
    and the ``first`` that have waited longest (from its RUNNING runs, as ``blocked_on``)."""
    counts = [
        msgspec.convert(dict(r), WaitCount) for r in await conn.fetch(WAIT_COUNTS, project_id)
    ]
    rows = [
        msgspec.convert(dict(r), Waiting) for r in await conn.fetch(WAIT_FIRST, project_id, first)
    ]
    return counts, rows


async def set_price(
    conn: Connection,
    project_id: str,
    model: str | None,
    *,
    input_price: Decimal | str | float,
    output_price: Decimal | str | float,
    actor: str,
) -> Price:
    """Set the project's price of ``model``: credits per 1,000 input and output tokens."""
    check_text("actor", actor, MAX_ACTOR, empty=False)
    model, pin, pout = check_price(model, input_price, output_price)
    flow_cache.changed()
    row = await conn.fetchrow(PRICE_SET, project_id, model, pin, pout, actor)
    log.info(
        "llm_price_set",
        key=key_text(project_id, model),
        input_price=str(pin),
        output_price=str(pout),
        actor=actor,
    )
    return _price(row)


async def end_price(conn: Connection, project_id: str, model: str, *, actor: str) -> Price:
    check_text("actor", actor, MAX_ACTOR, empty=False)
    flow_cache.changed()
    row = await conn.fetchrow(PRICE_END, project_id, model, actor)
    if row is None:
        raise LimitNotFoundError(
            f"no price of {key_text(project_id, model)} is in force", project_id=project_id
        )
    log.info("llm_price_ended", key=key_text(project_id, model), actor=actor)
    return _price(row)


async def prices(
    conn: Connection,
    project_id: str | None,
    *,
    model: str | None = None,
    history: bool = False,
    limit: int = 1000,
) -> list[Price]:
    """The prices (of ``model`` only when given), newest first."""
    rows = await conn.fetch(PRICE_LIST, project_id, history, limit, model)
    return [_price(row) for row in rows]
