"""What a doctor check returns, and the small helpers the checks share."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from awooop.services import Services

OK, WARN, FAIL = "OK", "WARN", "FAIL"


class Check(msgspec.Struct, frozen=True):
    name: str
    status: str
    detail: str
    fix: str = ""


CheckFn = Callable[[Services], Awaitable[list[Check]]]


async def one(conn: Any, query: str, *args: Any) -> Any:
    """The single row of an aggregate query (aggregates always return one)."""
    row = await conn.fetchrow(query, *args)
    assert row is not None
    return row


def describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 300 else text[:297] + "..."


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
