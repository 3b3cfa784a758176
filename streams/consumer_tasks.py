"""Small asyncio tools of the consumer: handler slots, stopping tasks, interruptible sleeps."""

from __future__ import annotations

import asyncio
from contextlib import suppress


class Slots:
    """A counter of free handler slots that readers can wait on."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.used = 0
        self._changed = asyncio.Event()

    @property
    def free(self) -> int:
        return self.size - self.used

    async def wait_free(self) -> None:
        while self.used >= self.size:
            self._changed.clear()
            await self._changed.wait()

    async def acquire(self) -> None:
        await self.wait_free()
        self.used += 1

    def release(self) -> None:
        self.used -= 1
        self._changed.set()


async def finish(tasks: list[asyncio.Task[None]], grace_s: float) -> None:
    """Wait for tasks told to stop; cancel the ones still running after ``grace_s``."""
    if not tasks:
        return
    _, late = await asyncio.wait(tasks, timeout=grace_s)
    for task in late:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def sleep_or_stop(delay: float, stop: asyncio.Event) -> None:
    if delay <= 0:
        return
    with suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=delay)
