"""The suite's one way to wait for something to happen: ``eventually`` polls a condition.

A test that waits on a fixed ``asyncio.sleep`` either wastes time or fails on a busy machine;
one that polls the condition it needs does neither, and on timeout says what it waited for
and what it saw last."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")

# Long enough for a loaded 2-core machine (other test runs, builds); a condition that holds
# returns at once, so a generous default only costs time when the test is failing anyway.
TIMEOUT_S = 30.0
INTERVAL_S = 0.05
_TRUTHY = object()  # ``equals`` not given: any truthy value will do


@overload
async def eventually(
    condition: Callable[[], Awaitable[T]],
    *,
    what: str,
    timeout_s: float = ...,
    interval_s: float = ...,
    ignoring: tuple[type[BaseException], ...] = ...,
    equals: object = ...,
) -> T: ...


@overload
async def eventually(
    condition: Callable[[], T],
    *,
    what: str,
    timeout_s: float = ...,
    interval_s: float = ...,
    ignoring: tuple[type[BaseException], ...] = ...,
    equals: object = ...,
) -> T: ...


async def eventually(
    condition: Callable[[], Any],
    *,
    what: str,
    timeout_s: float = TIMEOUT_S,
    interval_s: float = INTERVAL_S,
    ignoring: tuple[type[BaseException], ...] = (),
    equals: object = _TRUTHY,
) -> Any:
    """Call ``condition`` (sync or async) every ``interval_s`` until it returns a truthy value
    (or, given ``equals``, a value equal to it), and return that value. After ``timeout_s`` fail
    with an AssertionError naming ``what`` was awaited and the last value seen. Exceptions of
    the ``ignoring`` types count as "not yet" (a server still starting); any other exception
    propagates at once."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while True:
        try:
            value = condition()
            if inspect.isawaitable(value):
                value = await value
        except ignoring as exc:
            last = exc
        else:
            if bool(value) if equals is _TRUTHY else value == equals:
                return value
            last = value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout_s:g} s (last seen: {last!r})")
        await asyncio.sleep(interval_s)
