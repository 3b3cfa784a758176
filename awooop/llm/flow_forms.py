"""What ``awooop projects budget|rate-limit|price set`` and the routes' POST bodies name, as
one write each: the fields a command's options and a request's body share (the same names:
``tokens``, ``cost``, ``period``, ``reserve``, ``on_exceed``, ``limit``, ``burst``, ``input``,
``output``), read the same way whichever asked. A period is parsed when the write is made,
before a connection is taken; the caller has checked the model (:func:`check_model`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Protocol

from awooop.core.db import Connection
from awooop.llm import flow_store
from awooop.llm.flow_rules import Budget, OnExceed, Price, RateLimit, parse_period


class BudgetForm(Protocol):
    @property
    def tokens(self) -> int | None: ...
    @property
    def cost(self) -> int | None: ...
    @property
    def period(self) -> str: ...
    @property
    def reserve(self) -> int: ...
    @property
    def on_exceed(self) -> str: ...


class LimitForm(Protocol):
    @property
    def limit(self) -> int: ...
    @property
    def period(self) -> str: ...
    @property
    def burst(self) -> int | None: ...


class PriceForm(Protocol):
    @property
    def input(self) -> Decimal | str | float: ...
    @property
    def output(self) -> Decimal | str | float: ...


def budget(
    form: BudgetForm, project_id: str, model: str, actor: str
) -> Callable[[Connection], Awaitable[Budget]]:
    period_s = parse_period(form.period)
    return lambda conn: flow_store.set_budget(
        conn,
        project_id,
        model,
        tokens=form.tokens,
        cost=form.cost,
        period_s=period_s,
        reserve_tokens=form.reserve,
        on_exceed=OnExceed(form.on_exceed),
        actor=actor,
    )


def limit(
    form: LimitForm, project_id: str, model: str, actor: str
) -> Callable[[Connection], Awaitable[RateLimit]]:
    period_s = parse_period(form.period)
    return lambda conn: flow_store.set_limit(
        conn, project_id, model, limit=form.limit, period_s=period_s, burst=form.burst, actor=actor
    )


def price(
    form: PriceForm, project_id: str, model: str, actor: str
) -> Callable[[Connection], Awaitable[Price]]:
    return lambda conn: flow_store.set_price(
        conn, project_id, model, input_price=form.input, output_price=form.output, actor=actor
    )
