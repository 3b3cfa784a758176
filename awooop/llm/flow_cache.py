"""The flow rules of a model call (rate limits, budgets and the model's price in force), read
with one query and kept per process for :data:`TTL_S` seconds.

Every ``run.llm`` call needs the rules of its project and model before the model is called;
most projects have none, and the answer changes only when someone sets or clears a limit, a
budget or a price. So each worker process keeps the answer of each (project, model) for
:data:`TTL_S` (1 s), per database it talks to: a change made elsewhere (the CLI, the HTTP
routes, another process) holds every call within a second. A change made through
:mod:`awooop.llm.flow_store` in this process clears the process's cache at once
(:func:`changed`). The cache never decides alone where it matters:

- a call that waits for its budget reads the rules again on each retry (``fresh``), so a
  raised budget counts at once;
- a rate-limit token refused because the cached limit was replaced meanwhile is asked again
  with the fresh rules (:mod:`awooop.llm.admission`);
- reservations and tokens are taken with conditional UPDATEs of the counter and bucket rows,
  not of the cached copy, so the cache never lets more through than the rules it holds.
"""

from __future__ import annotations

import asyncio
import time
import uuid
import weakref
from collections.abc import Awaitable, Callable
from datetime import datetime
from decimal import Decimal
from typing import Any

import msgspec

from awooop.core.db import Connection, Database
from awooop.eventlog import queries
from awooop.llm.flow_rules import Budget, BudgetUnit, OnExceed

RULES = queries.load("llm_rules")

TTL_S = 1.0  # how long a process reuses the rules of a (project, model)
MAX_ENTRIES = 10_000  # per database; past it the cache starts again empty


class Rules(msgspec.Struct, frozen=True):
    """The rules in force for calls of one project to one model."""

    budgets: list[Budget]
    limits: list[tuple[uuid.UUID, str]]  # (limit id, model scope)
    price: tuple[Decimal, Decimal] | None  # credits per 1,000 input, output tokens

    @property
    def empty(self) -> bool:
        return not self.budgets and not self.limits


Fetch = Callable[[Callable[[Connection], Awaitable[Any]]], Awaitable[Any]]

_generation = 0
Entries = dict[tuple[str, str], tuple[float, int, Rules]]  # (expires, generation, rules)
_caches: weakref.WeakKeyDictionary[Database, Entries] = weakref.WeakKeyDictionary()
_flights: weakref.WeakKeyDictionary[
    Database, dict[tuple[str, str], tuple[int, asyncio.Future[Rules]]]
] = weakref.WeakKeyDictionary()


def changed() -> None:
    """A limit, budget or price was changed by this process: forget every cached answer."""
    global _generation
    _generation += 1


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
    """The rules of ``project_id``'s calls to ``model`` and whether they came from the cache;
    ``fresh``: read them (and refresh the cache) whatever the cache holds. Concurrent misses
    of one key share one read."""
    cache = _caches.setdefault(db, {})
    key = (project_id, model)
    hit = cache.get(key)
    if not fresh and hit is not None and hit[0] > time.monotonic() and hit[1] == _generation:
        return hit[2], True
    flights = _flights.setdefault(db, {})
    flight = flights.get(key)
    if fresh or flight is None or flight[0] != _generation:
        fetch = _fetch(cache, tx, project_id, model, _generation, time.monotonic())
        flight = (_generation, asyncio.ensure_future(fetch))
        flights[key] = flight
        flight[1].add_done_callback(
            lambda done: flights.pop(key) if flights.get(key, (0, None))[1] is done else None
        )
    return await asyncio.shield(flight[1]), False


async def _fetch(
    cache: Entries, tx: Fetch, project_id: str, model: str, generation: int, started: float
) -> Rules:
    """Read the rules and keep them until ``TTL_S`` after the read started, unless a read
    that started later already answered."""
    rows = await tx(lambda conn: conn.fetch(RULES, project_id, model))
    rules = rules_of(project_id, rows)
    if len(cache) >= MAX_ENTRIES:
        cache.clear()
    key, expires = (project_id, model), started + TTL_S
    old = cache.get(key)
    if old is None or (old[1], old[0]) <= (generation, expires):
        cache[key] = (expires, generation, rules)
    return rules


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
