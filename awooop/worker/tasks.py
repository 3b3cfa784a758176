"""Ending a worker's own tasks: wait a while, then cancel what is left and log a task that
failed; waiting for a task to end without cancelling it (:class:`Ended`); waiting for the
first of several events (:func:`first_of`)."""

from __future__ import annotations

import asyncio
from typing import Any

from awooop.core.logs import get_logger

log = get_logger("awooop.worker")


async def finish(tasks: list[asyncio.Task[Any]], wait_s: float) -> None:
    if not tasks:
        return
    _done, pending = await asyncio.wait(tasks, timeout=wait_s)
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending, timeout=5)
    for task in tasks:
        if task.done() and not task.cancelled() and task.exception() is not None:
            log.error("worker_task_failed", exc_info=task.exception())


async def first_of(*events: asyncio.Event, timeout_s: float | None) -> None:
    """Return when any of ``events`` is set, or after ``timeout_s`` (None: no limit)."""
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


class Ended:
    """A task's end, as one small done callback: ``done`` is a future done when the task is
    (cancelling it, its waiter cancelled, leaves the task running), and the task's entry in
    ``registry`` (under ``key``) is removed then, if it is still this task's. What ``await
    asyncio.wait({task})`` and a second callback do, at a fraction of their memory: every run
    in flight waits on its handler task this way."""

    __slots__ = ("_key", "_registry", "done")

    def __init__(
        self,
        task: asyncio.Future[Any],
        registry: dict[Any, asyncio.Task[Any]] | None = None,
        key: Any = None,
    ) -> None:
        self.done: asyncio.Future[None] = task.get_loop().create_future()
        self._registry = registry
        self._key = key
        task.add_done_callback(self)

    def __call__(self, task: asyncio.Future[Any]) -> None:
        if self._registry is not None and self._registry.get(self._key) is task:
            del self._registry[self._key]
        if not self.done.done():
            self.done.set_result(None)
