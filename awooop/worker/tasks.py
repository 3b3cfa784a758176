"""Ending a worker's own tasks: wait a while, then cancel what is left and log a task that
failed."""

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
