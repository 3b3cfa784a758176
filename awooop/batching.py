"""Group commit: concurrent requests for one key share one transaction.

Used by the worker (claims and fenced writes, keyed by project) and by the HTTP ingest
server (deliveries, keyed by project, channel and contract). Requests queue per key (one
tenant transaction per batch). While no flush of a
key runs, a request starts one at once with everything queued; requests that arrive during
a flush wait for the next one, which takes them all. At low load every request is flushed
alone and immediately (no added latency); under load, batches grow by themselves and the
number of transactions per run falls. Each flush gets its items in arrival order and returns
one result per item (a value, or an exception for that item alone); an exception raised by
the flush itself fails every item of that batch.

An item whose ``unique`` key is already in the batch being formed waits for the next batch,
so a flush never sees the same run twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
I = TypeVar("I")  # noqa: E741 - the item type, paired with K and R
R = TypeVar("R")


@dataclass
class _Pending(Generic[I, R]):
    item: I
    unique: Hashable
    future: asyncio.Future[R]


class Batcher(Generic[K, I, R]):
    def __init__(
        self,
        flush: Callable[[K, list[I]], Awaitable[list[R | BaseException]]],
        *,
        max_batch: int = 256,
    ) -> None:
        self._flush = flush
        self._max_batch = max_batch
        self._queues: dict[K, list[_Pending[I, R]]] = {}
        self._draining: set[K] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.flushes = 0
        self.items = 0

    async def submit(
        self,
        key: K,
        item: I,
        unique: Hashable = None,
        on_orphan: Callable[[R], object] | None = None,
    ) -> R:
        """Queue ``item`` and wait for its result. If the caller is cancelled meanwhile, the
        item is still flushed; ``on_orphan`` then gets its result (say, to undo a claim)."""
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._queues.setdefault(key, []).append(_Pending(item, unique, future))
        if key not in self._draining:
            self._draining.add(key)
            task = asyncio.ensure_future(self._drain(key))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            if on_orphan is not None:
                callback = on_orphan

                def orphaned(done: asyncio.Future[R]) -> None:
                    if not done.cancelled() and done.exception() is None:
                        callback(done.result())

                future.add_done_callback(orphaned)
            raise

    def _take(self, key: K) -> list[_Pending[I, R]]:
        queue = self._queues.get(key, [])
        batch: list[_Pending[I, R]] = []
        seen: set[Hashable] = set()
        rest: list[_Pending[I, R]] = []
        for pending in queue:
            if len(batch) < self._max_batch and (
                pending.unique is None or pending.unique not in seen
            ):
                batch.append(pending)
                if pending.unique is not None:
                    seen.add(pending.unique)
            else:
                rest.append(pending)
        self._queues[key] = rest
        return batch

    async def _drain(self, key: K) -> None:
        try:
            while batch := self._take(key):
                self.flushes += 1
                self.items += len(batch)
                try:
                    results = await self._flush(key, [p.item for p in batch])
                except BaseException as exc:
                    for pending in batch:
                        if not pending.future.done():
                            pending.future.set_exception(exc)
                    if isinstance(exc, asyncio.CancelledError):
                        raise
                    continue
                for pending, result in zip(batch, results, strict=True):
                    if pending.future.done():
                        continue
                    if isinstance(result, BaseException):
                        pending.future.set_exception(result)
                    else:
                        pending.future.set_result(result)
        finally:
            # Only a cancelled drain leaves items behind (no await since the last take).
            self._draining.discard(key)
            for pending in self._queues.pop(key, []):
                if not pending.future.done():
                    pending.future.set_exception(RuntimeError("the batcher was stopped"))
