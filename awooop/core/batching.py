"""Group commit: concurrent requests for one key share one transaction.

Used by the worker (claims and fenced writes, keyed by project) and by the HTTP ingest
server (deliveries, keyed by project, channel and contract). Requests queue per key (one
tenant transaction per batch). While fewer than ``parallel`` flushes of a key run, a request
starts one at once with everything queued; requests that arrive while that many run wait for
the next one to free up, which takes them all. At low load every request is flushed alone and
immediately (no added latency); under load, batches grow by themselves and the number of
transactions per run falls. Each flush gets its items in arrival order and returns one result
per item (a value, or an exception for that item alone).

**Failure isolation.** An exception raised by the flush itself is either the batch's as a whole
or possibly one item's (:func:`shared_failure`). The database being unavailable (a
connection-level error, ``awooop.core.retries.CONNECTION_ERRORS``, or DatabaseUnavailableError),
Redis being unavailable, or the flush being cancelled fails every item of the batch with it. Any
other (one item's text that jsonb refuses, a constraint, an illegal transition, a conflict that
outlasted its retries) makes the batcher flush each item of that batch ALONE, in order: each
gets its own result or its own exception, so a bad item fails alone and its neighbours go on
(``isolated`` counts such batches; the single flushes are not counted in ``flushes``). Should
one of those single flushes hit a shared failure, the items not yet flushed fail with it. A
batch of one item is never re-flushed. Callers tell an item's data error from the rest with
:func:`data_error`.

``parallel`` > 1 (the worker: a few connections per project) keeps a steady trickle of small
batches from waiting on each other's round trips, where one flush at a time would cap a
key's rate at (batch size / flush time).

An item whose ``unique`` key is in the batch being formed, or in a batch still being flushed,
waits for a later batch: a flush never sees the same run twice, and two items of one run are
never flushed at the same time (so their order is kept).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

import asyncpg

from awooop.core.errors import (
    DatabaseUnavailableError,
    IllegalTransitionError,
    RedisUnavailableError,
    UnstorableValueError,
)
from awooop.core.logs import get_logger
from awooop.core.retries import CONNECTION_ERRORS

K = TypeVar("K", bound=Hashable)
I = TypeVar("I")  # noqa: E741 - the item type, paired with K and R
R = TypeVar("R")

log = get_logger("awooop.core.batching")


def shared_failure(exc: BaseException) -> bool:
    """Pure: whether a flush's exception is the whole batch's (the database or Redis is
    unavailable, the flush was cancelled), so that flushing each item alone cannot help. Any
    other exception may have been caused by one item."""
    return not isinstance(exc, Exception) or isinstance(
        exc, (*CONNECTION_ERRORS, DatabaseUnavailableError, RedisUnavailableError)
    )


def data_error(exc: BaseException) -> bool:
    """Pure: whether an item's error comes from its own data, so that writing it again cannot
    help: Postgres refused a value (asyncpg.DataError: text jsonb cannot hold, invalid text
    for a type, a value out of range; also asyncpg's own refusal to encode an argument), a
    constraint (IntegrityConstraintViolationError), the catalog's UnstorableValueError or
    IllegalTransitionError, or a string that is not valid Unicode (UnicodeError)."""
    return isinstance(
        exc,
        (
            asyncpg.DataError,
            asyncpg.IntegrityConstraintViolationError,
            UnstorableValueError,
            IllegalTransitionError,
            UnicodeError,
        ),
    )


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
        parallel: int = 1,
    ) -> None:
        if parallel < 1:
            raise ValueError("parallel must be at least 1")
        self._flush = flush
        self._max_batch = max_batch
        self._parallel = parallel
        self._queues: dict[K, list[_Pending[I, R]]] = {}
        self._draining: dict[K, int] = {}  # key -> drains running
        self._in_flight: dict[K, set[Hashable]] = {}  # key -> unique keys being flushed
        self._tasks: set[asyncio.Task[None]] = set()
        self.flushes = 0
        self.items = 0
        self.isolated = 0  # batches whose flush failed and whose items were flushed one by one

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
        if self._draining.get(key, 0) < self._parallel:
            self._draining[key] = self._draining.get(key, 0) + 1
            task = asyncio.ensure_future(self._drain(key))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        if on_orphan is None:
            # A cancelled caller cancels the future: the item is flushed all the same and its
            # result dropped (_drain skips a future that is done), with no shield to pay for.
            return await future
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:

            def orphaned(done: asyncio.Future[R]) -> None:
                # Read here whatever it ends with: nobody else will (asyncio would log an
                # exception nobody read, once per item: thousands when many runs lose a lease).
                if not done.cancelled() and done.exception() is None:
                    on_orphan(done.result())

            future.add_done_callback(orphaned)
            raise

    def _take(self, key: K) -> list[_Pending[I, R]]:
        queue = self._queues.get(key, [])
        batch: list[_Pending[I, R]] = []
        busy = self._in_flight.setdefault(key, set())
        rest: list[_Pending[I, R]] = []
        for index, pending in enumerate(queue):
            if len(batch) == self._max_batch:
                # The rest as it stands: thousands of runs writing at once queue thousands of
                # items, and a take that looked at each of them would cost O(queue) per batch.
                rest.extend(queue[index:])
                break
            if pending.unique is None or pending.unique not in busy:
                batch.append(pending)
                if pending.unique is not None:
                    busy.add(pending.unique)
            else:
                rest.append(pending)
        self._queues[key] = rest
        return batch

    async def _flush_isolated(self, key: K, items: list[I]) -> list[R | BaseException]:
        """The batch's results: one flush, or when it fails for a reason that may be one
        item's (see the module docstring), one flush per item. Raises only CancelledError."""
        try:
            return await self._flush(key, items)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            if len(items) == 1 or shared_failure(exc):
                return [exc] * len(items)
            failure = exc
        self.isolated += 1
        log.warning(
            "batch_isolated", items=len(items), error=f"{type(failure).__name__}: {failure}"
        )
        results: list[R | BaseException] = []
        for item in items:
            try:
                [result] = await self._flush(key, [item])
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                result = exc
                if shared_failure(exc):  # the database went away meanwhile: all of the rest
                    results.extend([exc] * (len(items) - len(results)))
                    break
            results.append(result)
        return results

    async def _drain(self, key: K) -> None:
        cancelled = False
        try:
            while batch := self._take(key):
                self.flushes += 1
                self.items += len(batch)
                try:
                    results: list[R | BaseException] | BaseException = await self._flush_isolated(
                        key, [p.item for p in batch]
                    )
                except asyncio.CancelledError as exc:
                    results = exc
                finally:
                    busy = self._in_flight.get(key, set())
                    for pending in batch:
                        busy.discard(pending.unique)
                if isinstance(results, BaseException):
                    for pending in batch:
                        if not pending.future.done():
                            pending.future.set_exception(results)
                    cancelled = True
                    raise results
                for pending, result in zip(batch, results, strict=True):
                    if pending.future.done():
                        continue
                    if isinstance(result, BaseException):
                        pending.future.set_exception(result)
                    else:
                        pending.future.set_result(result)
        except asyncio.CancelledError:
            cancelled = True
            raise
        finally:
            self._draining[key] -= 1
            if not self._draining[key]:
                del self._draining[key]
                self._in_flight.pop(key, None)
            # Items are left behind only when this drain was cancelled (the batcher stops),
            # or when they wait for a unique key that another drain still flushes (that drain
            # takes them when it loops). A cancelled last drain fails what is left.
            if cancelled and key not in self._draining:
                for pending in self._queues.pop(key, []):
                    if not pending.future.done():
                        pending.future.set_exception(RuntimeError("the batcher was stopped"))
            elif key not in self._draining and not self._queues.get(key):
                self._queues.pop(key, None)
