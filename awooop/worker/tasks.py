"""Ending a worker's own tasks: wait a while, then cancel what is left and log a task that
failed; waiting for a task to end without cancelling it (:func:`ended`)."""

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


def ended(task: asyncio.Future[Any]) -> asyncio.Future[None]:
    """A future done when ``task`` is; cancelling it (its waiter cancelled) leaves ``task``
    running. What ``await asyncio.wait({task})`` does, at a fraction of its memory: every run
    in flight waits on its handler task this way."""
    done: asyncio.Future[None] = task.get_loop().create_future()

    def mark(_task: asyncio.Future[Any]) -> None:
        if not done.done():
            done.set_result(None)

    task.add_done_callback(mark)
    return done
