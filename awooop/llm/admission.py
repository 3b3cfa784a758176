"""Flow control of an attempt's model calls: budgets reserved, rate-limit tokens taken, usage
settled (the rules: :mod:`awooop.llm.flow_rules`; their rows: migration 0133).

``run.llm`` numbers its calls within the attempt and hands the gateway :meth:`FlowGate.admit`
for each; the gateway calls it once the policy has chosen the model, before the model is
called. ``admit`` reads the budgets, rate limits and the model's price in force for the
project and the model (one query, kept by the process for a second:
:mod:`awooop.llm.flow_cache`; nothing more when there are none) and then:

1. **Budgets** (project-wide and the model's own), in one transaction in a fixed order: each
   counter of the current period takes the call's reservation with one conditional UPDATE
   (settled + reserved + this call <= budget), and a reservation row keyed by (run, attempt,
   call sequence, model scope) records it. A budget counts tokens or, in cost, credits: the
   reserved tokens at the higher of the model's two prices (no price: E-BUDGET-004 before
   anything is reserved). Refused, the open reservations of attempts that no
   longer hold their run's lease are released first (a crashed worker's call was never
   recorded, so it is not charged) and the UPDATE is tried once more. Still refused: the
   whole reservation rolls back and the call fails with E-BUDGET-001 (``on_exceed`` fail) or
   waits (``wait``): until the next period, trying again every few seconds while other calls
   hold reservations (they may settle lower).
2. **Rate limits**: each bucket hands out its next token with one UPDATE that refills it from
   the database clock and answers when the token is due; the call sleeps until then. Tokens
   may be taken ahead, so waiting calls queue in order instead of polling; a token due
   further ahead than the wait bound is not taken (E-BUDGET-002).

While it waits the attempt keeps its lease (the heartbeat renews it), checks it every half
second (a lost lease or a cancelled run stops the wait with E-RUN-002 or the task's
cancellation) and, when the wait is long enough to be seen, records it in ``awooop_llm_waits``
for ``blocked_on`` (``rate_limited`` or ``over_budget``, the key and until when). No wait is
longer than ``AWOOOP_LLM_FLOW_MAX_WAIT_S`` (E-BUDGET-002).

:func:`record` writes the call's ``ModelCalled`` and settles its reservations to the reported
usage in one transaction, so a call is charged exactly when its record exists: a call retried
by a later attempt is a new call (a new record, a new charge), a call replayed from the
journal (``run.step``) calls nothing and charges nothing, and a call whose record never
committed is released.
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

from awooop.core import metrics
from awooop.core.db import Connection, Database
from awooop.core.errors import FlowWaitTooLongError, OverBudgetError, PriceNotFoundError
from awooop.core.events import Event
from awooop.core.logs import get_logger
from awooop.core.retries import unavailable_on_store_errors
from awooop.eventlog import queries
from awooop.llm import flow_cache
from awooop.llm.calls import called_event
from awooop.llm.client import ModelRequest
from awooop.llm.flow_cache import Rules
from awooop.llm.flow_rules import (
    Budget,
    BudgetUnit,
    OnExceed,
    Ticket,
    WaitReason,
    charges,
    key_text,
    reservation,
    reserved_cost,
)
from awooop.llm.gateway import ModelCall
from awooop.runs import leases

log = get_logger(__name__)

ENSURE = queries.load("llm_usage_ensure")
RESERVE = queries.load("llm_reserve")
RELEASE_STALE = queries.load("llm_release_stale")
ADD = queries.load("llm_reservation_add")
SETTLE = queries.load("llm_settle")
TAKE = queries.load("llm_take_token")
WAIT_SET = queries.load("llm_wait_set")
WAIT_END = queries.load("llm_wait_end")

CHECK_EVERY_S = 0.5  # how often a waiting call checks its attempt's lease
BUDGET_RETRY_S = 2.0  # how often a call over budget tries again while others hold reservations
VISIBLE_WAIT_S = 1.0  # a shorter wait is not recorded for blocked_on (nobody would see it)

Admit = Callable[[ModelRequest], Awaitable[None]]


class _NoToken(Exception):
    pass


class _Refused(Exception):
    def __init__(self, budget: Budget, used: int, reserved: int, end: datetime, now: datetime):
        super().__init__(budget.model)
        self.budget, self.used, self.reserved, self.end, self.now = budget, used, reserved, end, now


class FlowGate:
    """The flow control of one attempt's model calls (see the module doc)."""

    def __init__(
        self,
        db: Database,
        *,
        project_id: str,
        run_id: uuid.UUID,
        attempt: int,
        worker_id: str,
        check: Callable[[], None],
        max_wait_s: float,
        io_timeout_s: float | None = None,
    ) -> None:
        self._db = db
        self.project_id = project_id
        self.run_id = run_id
        self.attempt = attempt
        self.worker_id = worker_id
        self._check = check
        self._max_wait_s = max_wait_s
        self._io_timeout_s = io_timeout_s
        self._seq = 0
        self._tickets: dict[int, Ticket] = {}
        self._waiting = False

    def next_call(self) -> int:
        self._seq += 1
        return self._seq

    def admitter(self, seq: int) -> Admit:
        return lambda request: self.admit(seq, request)

    def ticket(self, seq: int) -> Ticket | None:
        """The reservations call ``seq`` holds (taken: settle them once)."""
        return self._tickets.pop(seq, None)

    async def _tx(self, fn: Callable[[Connection], Awaitable[Any]]) -> Any:
        return await self._db.in_tenant(self.project_id, fn, timeout_s=self._io_timeout_s)

    async def _rules(self, model: str, *, fresh: bool = False) -> tuple[Rules, bool]:
        return await flow_cache.read(self._db, self._tx, self.project_id, model, fresh=fresh)

    async def admit(self, seq: int, request: ModelRequest) -> None:
        rules, cached = await self._rules(request.model)
        if rules.empty:
            return
        deadline = time.monotonic() + self._max_wait_s
        try:
            if rules.budgets:
                ticket = await self._reserve(seq, request, rules, deadline)
                if ticket is not None:
                    self._tickets[seq] = ticket
            limits = rules.limits
            while limits:
                stale = await self._take(limits, deadline, retry=cached)
                if not stale:
                    break
                # A cached limit was replaced or ended meanwhile: ask with the rules now.
                limits, cached = (await self._rules(request.model, fresh=True))[0].limits, False
        finally:
            if self._waiting:
                self._waiting = False
                try:
                    await self._tx(lambda c: c.execute(WAIT_END, self.run_id, self.attempt))
                except Exception:
                    log.warning("llm_wait_end_failed", run_id=str(self.run_id), exc_info=True)

    # --- budgets ------------------------------------------------------------------------------

    def _amounts(
        self, request: ModelRequest, rules: Rules
    ) -> tuple[dict[str, int], dict[str, int]]:
        """The tokens a call reserves on each budget, and the amount in the budget's unit."""
        tokens = {b.model: reservation(request.options, b) for b in rules.budgets}
        amounts = dict(tokens)
        for b in rules.budgets:
            if b.unit is BudgetUnit.COST:
                if rules.price is None:
                    metrics.LLM_THROTTLED.labels("refused").inc()
                    raise PriceNotFoundError(
                        f"model {request.model!r} has no price, and the budget of "
                        f"{key_text(self.project_id, b.model)} is in cost: set its price "
                        "(awooop projects price set)",
                        project_id=self.project_id,
                    )
                amounts[b.model] = reserved_cost(tokens[b.model], *rules.price)
            if amounts[b.model] > b.amount:  # can never fit, whatever the period
                metrics.LLM_THROTTLED.labels("refused").inc()
                raise OverBudgetError(
                    f"the call reserves {amounts[b.model]} {b.unit_word}, more than the whole "
                    f"budget of {key_text(self.project_id, b.model)} ({b.amount} per "
                    f"{b.period_s} s)",
                    project_id=self.project_id,
                )
        return tokens, amounts

    async def _reserve(
        self, seq: int, request: ModelRequest, rules: Rules, deadline: float
    ) -> Ticket | None:
        counted = False
        while rules.budgets:
            budgets = rules.budgets
            tokens, amounts = self._amounts(request, rules)
            self._check()
            try:
                await self._tx(
                    functools.partial(self._try_reserve, seq=seq, budgets=budgets, amounts=amounts)
                )
                units = {b.model: b.unit for b in budgets}
                return Ticket(seq, dict(amounts), units, tokens, rules.price)
            except _Refused as refused:
                b, key = refused.budget, key_text(self.project_id, refused.budget.model)
                what = (
                    f"{refused.used} of {b.amount} {b.unit_word} used and {refused.reserved} "
                    f"reserved this period; the call reserves {amounts[b.model]}"
                )
                if b.on_exceed is OnExceed.FAIL:
                    metrics.LLM_THROTTLED.labels("refused").inc()
                    raise OverBudgetError(
                        f"over the budget of {key}: {what}", project_id=self.project_id
                    ) from None
                if not counted:
                    counted = True
                    metrics.LLM_THROTTLED.labels(WaitReason.OVER_BUDGET.value).inc()
                # Try again at the next period, or sooner: calls in flight may settle lower,
                # and the budget may be raised meanwhile (the rules are read again).
                to_end = max((refused.end - refused.now).total_seconds(), 0.05)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise FlowWaitTooLongError(
                        f"over_budget on {key} until {refused.end:%Y-%m-%d %H:%M:%SZ} ({what}): "
                        "waited as long as AWOOOP_LLM_FLOW_MAX_WAIT_S allows",
                        project_id=self.project_id,
                    ) from None
                await self._wait(
                    WaitReason.OVER_BUDGET,
                    key,
                    what,
                    refused.end,
                    min(to_end, BUDGET_RETRY_S, left),
                )
            rules = (await self._rules(request.model, fresh=True))[0]
        return None

    async def _try_reserve(
        self, conn: Connection, *, seq: int, budgets: Sequence[Budget], amounts: dict[str, int]
    ) -> None:
        async with conn.transaction():  # a savepoint: a refusal takes every reservation back
            for b in budgets:
                amount, unit = amounts[b.model], b.unit.value
                period = await conn.fetchrow(ENSURE, self.project_id, b.model, b.period_s, unit)
                assert period is not None
                counter = (self.project_id, b.model, b.period_s, period["start"])
                row = await conn.fetchrow(RESERVE, *counter, amount, b.amount, unit)
                if row is None:
                    swept = await conn.fetchrow(RELEASE_STALE, *counter, unit)
                    if swept is not None and swept["released"]:
                        log.info(
                            "llm_reservations_released",
                            key=key_text(self.project_id, b.model),
                            released=swept["released"],
                        )
                    row = await conn.fetchrow(RESERVE, *counter, amount, b.amount, unit)
                    if row is None:
                        raise _Refused(
                            b,
                            0 if swept is None else swept["used"],
                            0 if swept is None else swept["reserved"],
                            period["period_end"],
                            period["now"],
                        )
                await conn.execute(
                    ADD,
                    self.run_id,
                    self.attempt,
                    seq,
                    b.model,
                    *counter[:1],
                    *counter[2:],
                    amount,
                    unit,
                )

    # --- rate limits --------------------------------------------------------------------------

    async def _take(
        self, limits: Sequence[tuple[uuid.UUID, str]], deadline: float, *, retry: bool
    ) -> bool:
        """Take a token of each limit and sleep until the last is due. True (nothing taken):
        a token was refused and ``retry`` says the limits may be stale (from the cache)."""
        self._check()
        left = max(0.0, deadline - time.monotonic())

        async def take(conn: Connection) -> tuple[datetime, datetime, str] | None:
            latest: tuple[datetime, datetime, str] | None = None
            try:
                async with conn.transaction():  # a refused token gives the others back
                    for limit_id, model in limits:
                        row = await conn.fetchrow(TAKE, limit_id, left)
                        if row is None:
                            raise _NoToken
                        if latest is None or row["due"] > latest[0]:
                            latest = (row["due"], row["now"], model)
            except _NoToken:
                return None
            return latest

        got = await self._tx(take)
        if got is None and retry:
            return True
        if got is None:
            metrics.LLM_THROTTLED.labels("refused").inc()
            raise FlowWaitTooLongError(
                f"the next model call token of {key_text(self.project_id, '')} (or its model's) "
                f"is due later than the wait bound ({left:.0f} s)",
                project_id=self.project_id,
            )
        due, now, model = got
        wait_s = (due - now).total_seconds()
        if wait_s > 0:
            metrics.LLM_THROTTLED.labels(WaitReason.RATE_LIMITED.value).inc()
            key = key_text(self.project_id, model)
            await self._wait(WaitReason.RATE_LIMITED, key, "", due, wait_s)
        return False

    # --- waiting --------------------------------------------------------------------------------

    async def _wait(
        self, reason: WaitReason, key: str, detail: str, until: datetime, wait_s: float
    ) -> None:
        if wait_s >= VISIBLE_WAIT_S:
            self._waiting = True
            await self._tx(
                lambda c: c.execute(
                    WAIT_SET,
                    self.run_id,
                    self.project_id,
                    self.attempt,
                    reason.value,
                    key,
                    detail[:500],
                    until,
                )
            )
        end = time.monotonic() + wait_s
        while (left := end - time.monotonic()) > 0:
            self._check()
            await asyncio.sleep(min(left, CHECK_EVERY_S))
        self._check()

    # --- settling -------------------------------------------------------------------------------

    async def record(
        self,
        ticket: Ticket,
        call: ModelCall,
        metadata: dict[str, Any] | None,
        then: Callable[[datetime], Event] | None = None,
    ) -> None:
        """Write ``call``'s ModelCalled (fenced: only while the attempt holds its lease), and
        ``then(now)``'s event after it when given (the step the call answers, ``run.llm_step``),
        and settle its reservations to its reported usage, in one transaction."""
        result = call.result
        counts = (None, None) if result is None else (result.input_tokens, result.output_tokens)
        charged = charges(ticket, result is not None, *counts)
        worker_id, attempt = self.worker_id, self.attempt

        def events(_s: object, now: datetime) -> Event | tuple[Event, ...]:
            called = called_event(call, worker_id=worker_id, attempt=attempt, at=now)
            return called if then is None else (called, then(now))

        async def write(conn: Connection) -> None:
            await leases.fenced_record(conn, self.run_id, worker_id, attempt, events, metadata)
            await self.settle(conn, ticket, charged)

        with unavailable_on_store_errors("the model call record failed"):
            await self._tx(write)

    async def settle(self, conn: Connection, ticket: Ticket, charged: dict[str, int]) -> None:
        """Settle call ``ticket`` to what it ``charged`` each model scope (in its budget's
        unit) on ``conn`` (the transaction of its ModelCalled event), in the order reservations
        were taken (no lock cycles)."""
        for model in sorted(ticket.reserved):
            used = charged[model]
            await conn.fetchrow(SETTLE, self.run_id, self.attempt, ticket.seq, model, used)
        tokens = [charged[m] for m, u in ticket.units.items() if u is BudgetUnit.TOKENS]
        if tokens:
            metrics.LLM_BUDGET_TOKENS.inc(tokens[0])
