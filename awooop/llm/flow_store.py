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
from typing import Any, Generic, TypeVar

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

R = TypeVar("R", RateLimit, Budget, Price)

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


class Kind(Generic[R]):
    """One kind of flow-control row: its name in messages (``word``; ``slug`` in commands and
    paths), its row type, its statements (``sql/<sql>_set|_end|_list.sql``) and the prefix of
    its log events (``<event>_set``, ``<event>_ended``)."""

    def __init__(self, word: str, row: type[R], sql: str, event: str, *, per_model: bool) -> None:
        self.word: str = word
        self.slug: str = word.replace(" ", "-")
        self.row: type[R] = row
        self.event: str = event
        self.per_model: bool = per_model
        self.set_sql: str = queries.load(f"{sql}_set")
        self.end_sql: str = queries.load(f"{sql}_end")
        self.list_sql: str = queries.load(f"{sql}_list")

    def of(self, row: Any) -> R:
        made: R = msgspec.convert(dict(row), self.row)
        return made


# A price is always of one model (``per_model``); a limit or budget of model '' holds them all.
LIMITS = Kind("rate limit", RateLimit, "llm_limit", "llm_rate_limit", per_model=False)
BUDGETS = Kind("budget", Budget, "llm_budget", "llm_budget", per_model=False)
PRICES = Kind("price", Price, "llm_price", "llm_price", per_model=True)


async def _put(
    conn: Connection, kind: Kind[R], project_id: str, model: str, *params: Any, **logged: Any
) -> R:
    """Replace ``kind``'s row in force of (``project_id``, ``model``): ``params`` are the
    statement's after those two, ``logged`` what the log event says besides the key."""
    flow_cache.changed()
    made = kind.of(await conn.fetchrow(kind.set_sql, project_id, model, *params))
    log.info(f"{kind.event}_set", key=key_text(project_id, model), **logged)
    return made


async def end(conn: Connection, kind: Kind[R], project_id: str, model: str, *, actor: str) -> R:
    """End ``kind``'s row in force of (``project_id``, ``model``); none: E-BUDGET-003."""
    check_text("actor", actor, MAX_ACTOR, empty=False)
    flow_cache.changed()
    row = await conn.fetchrow(kind.end_sql, project_id, model, actor)
    if row is None:
        raise LimitNotFoundError(
            f"no {kind.word} of {key_text(project_id, model)} is in force", project_id=project_id
        )
    log.info(f"{kind.event}_ended", key=key_text(project_id, model), actor=actor)
    return kind.of(row)


async def _rows(conn: Connection, kind: Kind[R], *params: Any) -> list[R]:
    return [kind.of(row) for row in await conn.fetch(kind.list_sql, *params)]


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
    return await _put(
        conn,
        LIMITS,
        project_id,
        model,
        limit,
        period_s,
        burst,
        actor,
        limit=limit,
        period_s=period_s,
        burst=burst,
        actor=actor,
    )


async def limits(
    conn: Connection, project_id: str | None, *, history: bool = False, limit: int = 1000
) -> list[RateLimit]:
    return await _rows(conn, LIMITS, project_id, history, limit)


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
    return await _put(
        conn,
        BUDGETS,
        project_id,
        model,
        amount if unit is BudgetUnit.TOKENS else 0,
        period_s,
        reserve_tokens,
        on_exceed.value,
        actor,
        unit.value,
        amount if unit is BudgetUnit.COST else None,
        amount=amount,
        unit=unit.value,
        period_s=period_s,
        on_exceed=on_exceed.value,
        actor=actor,
    )


async def budgets(
    conn: Connection, project_id: str | None, *, history: bool = False, limit: int = 1000
) -> list[Budget]:
    """The budgets (with their current period's usage), newest first."""
    return await _rows(conn, BUDGETS, project_id, history, limit)


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
    return await _put(
        conn,
        PRICES,
        project_id,
        model,
        pin,
        pout,
        actor,
        input_price=str(pin),
        output_price=str(pout),
        actor=actor,
    )


async def prices(
    conn: Connection,
    project_id: str | None,
    *,
    model: str | None = None,
    history: bool = False,
    limit: int = 1000,
) -> list[Price]:
    """The prices (of ``model`` only when given), newest first."""
    return await _rows(conn, PRICES, project_id, history, limit, model)
