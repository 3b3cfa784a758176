"""Rate limits and token budgets of model calls, as pure decisions (flow control, scope
``awooop_llm``).

A **rate limit** is a token bucket per project and model ('' = every model of the project):
``limit`` calls per ``period_s`` seconds, at most ``burst`` at once. A **budget** is a number
of tokens (input plus output, as the model client reports them) per period per project and
model; a call reserves its maximum before it starts (its ``max_tokens`` or ``num_predict``
option, else the budget's ``reserve_tokens``) and is settled to what it used. Over budget the
call waits for the next period or fails with E-BUDGET-001, as the budget says (``on_exceed``).
:mod:`awooop.llm.flow_store` stores them, :mod:`awooop.llm.admission` enforces them.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import msgspec

from awooop.core.errors import InvalidInputError

SCOPE = "awooop_llm"
MAX_MODEL = 200
PERIODS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 7 * 86400}
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
RESERVE_OPTIONS = ("max_tokens", "num_predict")


class OnExceed(enum.StrEnum):
    WAIT = "wait"
    FAIL = "fail"


class WaitReason(enum.StrEnum):
    RATE_LIMITED = "rate_limited"
    OVER_BUDGET = "over_budget"


class RateLimit(msgspec.Struct, frozen=True, kw_only=True):
    limit_id: uuid.UUID
    project_id: str
    model: str
    limit_count: int
    period_s: float
    burst: int
    set_by: str
    valid_from: datetime
    granted: int = 0
    valid_to: datetime | None = None
    ended_by: str | None = None
    available: float | None = None  # the tokens its bucket holds now (a row in force)


class Budget(msgspec.Struct, frozen=True, kw_only=True):
    budget_id: uuid.UUID
    project_id: str
    model: str
    tokens: int
    period_s: int
    reserve_tokens: int
    on_exceed: OnExceed
    set_by: str
    valid_from: datetime
    valid_to: datetime | None = None
    ended_by: str | None = None
    # The current period (reads only): its bounds and its counter.
    period_start: datetime | None = None
    period_end: datetime | None = None
    used: int = 0
    reserved: int = 0
    calls: int = 0


def check_model(model: str | None) -> str:
    """Pure: the model scope a command names ('' for every model of the project)."""
    if model is None:
        return ""
    if not model or len(model) > MAX_MODEL:
        raise InvalidInputError(f"model must be 1-{MAX_MODEL} characters")
    return model


def parse_period(text: str) -> int:
    """Pure: seconds of a period: ``second|minute|hour|day|week`` or ``<n>s|m|h|d|w``."""
    word = text.strip().lower()
    if word in PERIODS:
        return PERIODS[word]
    number, unit = word[:-1], word[-1:]
    if unit in UNITS and number.isdigit() and int(number) > 0:
        return int(number) * UNITS[unit]
    if word.isdigit() and int(word) > 0:
        return int(word)
    raise InvalidInputError(
        f"period {text!r}: expected second|minute|hour|day|week or N followed by s|m|h|d|w"
    )


def check_limit(limit: int, period_s: float, burst: int | None) -> int:
    """Pure: the burst of a valid rate limit (default: the limit itself)."""
    if limit < 1:
        raise InvalidInputError("a rate limit allows at least 1 call per period")
    if period_s <= 0:
        raise InvalidInputError("a rate limit's period must be positive")
    burst = limit if burst is None else burst
    if burst < 1:
        raise InvalidInputError("burst must be at least 1")
    return burst


def check_budget(tokens: int, reserve_tokens: int) -> None:
    if tokens < 0:
        raise InvalidInputError("a budget is 0 or more tokens")
    if reserve_tokens < 1:
        raise InvalidInputError("--reserve must be at least 1 token")


def key_text(project_id: str, model: str) -> str:
    """Pure: the key a limit or budget is known by: ``awooop_llm:<project>[:<model>]``."""
    return f"{SCOPE}:{project_id}" + (f":{model}" if model else "")


def reservation(options: Mapping[str, Any], budget: Budget) -> int:
    """Pure: the tokens a call reserves on ``budget``: its ``max_tokens`` (or Ollama's
    ``num_predict``) option when it names a positive whole number, else the budget's
    ``reserve_tokens``."""
    for name in RESERVE_OPTIONS:
        value = options.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return budget.reserve_tokens


def charge(
    reserved: int, answered: bool, input_tokens: int | None, output_tokens: int | None
) -> int:
    """Pure: what a settled call costs its budgets: nothing when it got no answer, the
    reported input plus output tokens, or (the model reported no counts) its reservation."""
    if not answered:
        return 0
    if input_tokens is None and output_tokens is None:
        return reserved
    return (input_tokens or 0) + (output_tokens or 0)


def describe_budget(b: Budget) -> str:
    """Pure: ``1200 of 10000 tokens used (300 reserved) until <end>``."""
    end = "-" if b.period_end is None else b.period_end.strftime("%Y-%m-%d %H:%M:%SZ")
    return f"{b.used} of {b.tokens} tokens used ({b.reserved} reserved) until {end}"
