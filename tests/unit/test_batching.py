"""Group commit (awooop.core.batching): batches form by themselves, results go to their callers,
one item's failure stays its own (also when it breaks the whole flush: the items are then
flushed alone), a cancelled caller's item is still flushed."""

from __future__ import annotations

import asyncio
import gc

import asyncpg
import pytest

from awooop.core.batching import Batcher, data_error, shared_failure
from awooop.core.errors import (
    DatabaseUnavailableError,
    DedupeRaceError,
    IllegalTransitionError,
    LeaseLostError,
    UnstorableValueError,
)
from tests.support.waiting import eventually


class Recorder:
    def __init__(self, delay: float = 0.01) -> None:
        self.batches: list[tuple[str, list[int]]] = []
        self.delay = delay

    async def flush(self, key: str, items: list[int]) -> list[int | BaseException]:
        self.batches.append((key, list(items)))
        await asyncio.sleep(self.delay)
        return [ValueError(f"bad {i}") if i < 0 else i * 10 for i in items]


async def test_a_lone_request_is_flushed_at_once_and_alone() -> None:
    rec = Recorder()
    batcher: Batcher[str, int, int] = Batcher(rec.flush)
    assert await batcher.submit("p", 1) == 10
    assert rec.batches == [("p", [1])]


async def test_requests_arriving_during_a_flush_share_the_next_one() -> None:
    rec = Recorder()
    batcher: Batcher[str, int, int] = Batcher(rec.flush)
    first = asyncio.ensure_future(batcher.submit("p", 1))
    await eventually(lambda: rec.batches, interval_s=0.001, what="the first flush under way")
    results = await asyncio.gather(first, *(batcher.submit("p", i) for i in range(2, 11)))
    assert results == [i * 10 for i in range(1, 11)]
    # The first went alone; the other nine arrived meanwhile and went together.
    assert rec.batches == [("p", [1]), ("p", list(range(2, 11)))]
    assert (batcher.flushes, batcher.items) == (2, 10)


async def test_requests_queued_together_go_together() -> None:
    rec = Recorder()
    batcher: Batcher[str, int, int] = Batcher(rec.flush)
    assert await asyncio.gather(*(batcher.submit("p", i) for i in range(3))) == [0, 10, 20]
    assert rec.batches == [("p", [0, 1, 2])]


async def test_keys_are_flushed_separately() -> None:
    rec = Recorder()
    batcher: Batcher[str, int, int] = Batcher(rec.flush)
    await asyncio.gather(batcher.submit("a", 1), batcher.submit("b", 2), batcher.submit("a", 3))
    assert sorted(rec.batches) == [("a", [1, 3]), ("b", [2])]


async def test_a_unique_key_is_never_twice_in_one_batch() -> None:
    rec = Recorder()
    batcher: Batcher[str, int, int] = Batcher(rec.flush)
    first = asyncio.ensure_future(batcher.submit("p", 1, unique="x"))
    await asyncio.sleep(0)  # one turn: the first flush starts alone
    rest = [batcher.submit("p", i, unique=u) for i, u in ((2, "y"), (3, "y"), (4, "z"))]
    await asyncio.gather(first, *rest)
    assert rec.batches == [("p", [1]), ("p", [2, 4]), ("p", [3])]


async def test_batches_are_bounded() -> None:
    rec = Recorder()
    batcher: Batcher[str, int, int] = Batcher(rec.flush, max_batch=3)
    await asyncio.gather(*(batcher.submit("p", i) for i in range(1, 9)))
    assert [items for _key, items in rec.batches] == [[1, 2, 3], [4, 5, 6], [7, 8]]


async def test_an_item_error_fails_only_that_item() -> None:
    rec = Recorder()
    batcher: Batcher[str, int, int] = Batcher(rec.flush)
    good = asyncio.ensure_future(batcher.submit("p", 2))
    bad = asyncio.ensure_future(batcher.submit("p", -1))
    assert await good == 20
    with pytest.raises(ValueError, match="bad -1"):
        await bad


async def test_a_flush_error_fails_its_batch_and_the_next_batch_still_runs() -> None:
    calls: list[list[int]] = []

    async def flaky(_key: str, items: list[int]) -> list[int | BaseException]:
        calls.append(items)
        await asyncio.sleep(0.01)
        if len(calls) == 1:
            raise ConnectionError("database went away")
        return list(items)

    batcher: Batcher[str, int, int] = Batcher(flaky)
    first = asyncio.ensure_future(batcher.submit("p", 1))
    await asyncio.sleep(0)  # one turn: the first flush starts alone
    second = asyncio.ensure_future(batcher.submit("p", 2))
    with pytest.raises(ConnectionError):
        await first
    assert await second == 2


async def test_a_cancelled_callers_item_is_flushed_and_handed_to_on_orphan() -> None:
    rec = Recorder(delay=0.05)
    batcher: Batcher[str, int, int] = Batcher(rec.flush)
    orphans: list[int] = []
    caller = asyncio.ensure_future(batcher.submit("p", 7, on_orphan=orphans.append))
    await eventually(lambda: rec.batches, interval_s=0.001, what="the caller's flush under way")
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    await eventually(lambda: orphans, what="the orphaned result handed to on_orphan")
    assert rec.batches == [("p", [7])] and orphans == [70]


async def test_a_cancelled_callers_failed_item_leaves_no_exception_unread() -> None:
    """Nobody waits for the item of a cancelled caller: its error is read by the batcher, so
    asyncio logs no "exception was never retrieved" (thousands of them when a worker loses the
    leases of thousands of runs at once)."""
    loop = asyncio.get_running_loop()
    unread: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, context: unread.append(context))
    flushed = asyncio.Event()

    async def failing(_key: str, items: list[int]) -> list[int | BaseException]:
        await asyncio.sleep(0.05)
        flushed.set()
        return [ValueError("refused") for _ in items]

    batcher: Batcher[str, int, int] = Batcher(failing)
    caller = asyncio.ensure_future(batcher.submit("p", 7))
    await asyncio.sleep(0.01)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    await asyncio.wait_for(flushed.wait(), 5)
    await asyncio.sleep(0)  # the future's callbacks run
    del caller
    gc.collect()
    loop.set_exception_handler(None)
    assert unread == []


class Overlap(Recorder):
    """Records how many flushes of a key run at once, and which unique items overlap."""

    def __init__(self, delay: float = 0.01) -> None:
        super().__init__(delay)
        self.running = 0
        self.most = 0

    async def flush(self, key: str, items: list[int]) -> list[int | BaseException]:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            return await super().flush(key, items)
        finally:
            self.running -= 1


async def test_parallel_flushes_of_one_key_run_at_once() -> None:
    rec = Overlap()
    gate = asyncio.Event()  # every flush waits here: none ends before the third starts
    waiting = 0

    async def held(key: str, items: list[int]) -> list[int | BaseException]:
        nonlocal waiting
        waiting += 1
        await gate.wait()
        return await rec.flush(key, items)

    batcher: Batcher[str, int, int] = Batcher(held, parallel=3)
    first = []
    for i in range(3):  # each arrives while the earlier flushes run: a drain of its own
        first.append(asyncio.ensure_future(batcher.submit("p", i)))
        await eventually(
            lambda n=i + 1: waiting == n,
            interval_s=0.001,
            what=f"{i + 1} flushes under way",
        )
    gate.set()
    assert await asyncio.gather(*first) == [0, 10, 20]
    assert [items for _key, items in rec.batches] == [[0], [1], [2]]
    assert rec.most == 3
    one: Batcher[str, int, int] = Batcher(Overlap().flush)
    assert one._parallel == 1


async def test_parallel_flushes_never_carry_one_unique_key_at_once_and_keep_its_order() -> None:
    rec = Overlap(delay=0.005)
    batcher: Batcher[str, int, int] = Batcher(rec.flush, parallel=4)
    # Items 0..39 over 4 unique keys, submitted one by one while flushes are under way.
    tasks = []
    for i in range(40):
        tasks.append(asyncio.ensure_future(batcher.submit("p", i, unique=i % 4)))
        await asyncio.sleep(0.001)
    assert await asyncio.gather(*tasks) == [i * 10 for i in range(40)]
    assert rec.most >= 2
    order: dict[int, list[int]] = {}
    for _key, items in rec.batches:
        assert len({i % 4 for i in items}) == len(items)  # a key at most once per batch
        for i in items:
            order.setdefault(i % 4, []).append(i)
    assert all(seq == sorted(seq) for seq in order.values())  # per key, arrival order


def test_parallel_must_be_positive() -> None:
    with pytest.raises(ValueError, match="parallel"):
        Batcher(Recorder().flush, parallel=0)


class Poisoned:
    """A flush that fails as a whole whenever its batch holds a negative item (as a statement
    fails when one row's value is refused), with ``error``; it records every batch."""

    def __init__(self, error: type[BaseException] = ValueError) -> None:
        self.batches: list[list[int]] = []
        self.error = error

    async def flush(self, _key: str, items: list[int]) -> list[int | BaseException]:
        self.batches.append(list(items))
        await asyncio.sleep(0.01)
        bad = [i for i in items if i < 0]
        if bad:
            raise self.error(f"statement refused: item {bad[0]}")
        return [i * 10 for i in items]


async def test_a_flush_failing_because_of_one_item_fails_only_that_item() -> None:
    flush = Poisoned()
    batcher: Batcher[str, int, int] = Batcher(flush.flush)
    results = await asyncio.gather(
        *(batcher.submit("p", i) for i in (1, 2, -3, 4)), return_exceptions=True
    )
    assert results[:2] == [10, 20] and results[3] == 40
    assert isinstance(results[2], ValueError) and "item -3" in str(results[2])
    # One batch of four, then each item alone, in order.
    assert flush.batches == [[1, 2, -3, 4], [1], [2], [-3], [4]]
    assert (batcher.flushes, batcher.items, batcher.isolated) == (1, 4, 1)


async def test_a_connection_level_flush_error_fails_the_batch_without_flushing_items_alone() -> (
    None
):
    for error in (ConnectionResetError, DatabaseUnavailableError):
        flush = Poisoned(error)
        batcher: Batcher[str, int, int] = Batcher(flush.flush)
        results = await asyncio.gather(
            *(batcher.submit("p", i) for i in (1, -2, 3)), return_exceptions=True
        )
        assert all(isinstance(r, error) for r in results)
        assert flush.batches == [[1, -2, 3]] and batcher.isolated == 0


async def test_the_database_going_away_during_the_single_flushes_fails_the_rest() -> None:
    calls: list[list[int]] = []

    async def flush(_key: str, items: list[int]) -> list[int | BaseException]:
        calls.append(list(items))
        if len(items) > 1:
            raise ValueError("one item's data")
        if items == [2]:
            raise ConnectionResetError("gone")
        return [i * 10 for i in items]

    batcher: Batcher[str, int, int] = Batcher(flush)
    results = await asyncio.gather(
        *(batcher.submit("p", i) for i in (1, 2, 3, 4)), return_exceptions=True
    )
    assert results[0] == 10
    assert all(isinstance(r, ConnectionResetError) for r in results[1:])
    assert calls == [[1, 2, 3, 4], [1], [2]]  # 3 and 4 were not flushed into a lost database


async def test_items_flushed_alone_keep_their_unique_key_busy() -> None:
    """While a failed batch's items are flushed one by one, a later item of the same unique
    key waits: two writes of one run never run at once, and their order is kept."""
    flush = Poisoned()
    batcher: Batcher[str, int, int] = Batcher(flush.flush, parallel=4)
    first = [asyncio.ensure_future(batcher.submit("p", i, unique=i)) for i in (1, -2, 3)]
    await asyncio.sleep(0)  # the batch [1, -2, 3] is under way
    later = asyncio.ensure_future(batcher.submit("p", 5, unique=3))
    await asyncio.gather(*first, later, return_exceptions=True)
    assert later.result() == 50
    position = flush.batches.index([5])
    assert flush.batches.index([3]) < position


def test_shared_failure_is_the_database_or_redis_being_away_or_a_cancellation() -> None:
    shared: list[BaseException] = [
        ConnectionResetError(),
        ConnectionRefusedError(),
        TimeoutError(),
        OSError("network unreachable"),
        asyncpg.ConnectionDoesNotExistError(),
        asyncpg.InterfaceError("connection closed"),
        asyncpg.AdminShutdownError(),
        DatabaseUnavailableError(),
        asyncio.CancelledError(),
        KeyboardInterrupt(),
    ]
    own: list[BaseException] = [
        asyncpg.UntranslatableCharacterError(),
        asyncpg.UniqueViolationError(),
        asyncpg.SerializationError(),
        IllegalTransitionError(),
        UnstorableValueError(),
        DedupeRaceError(),
        ValueError(),
        KeyError(),
    ]
    assert [e for e in shared if not shared_failure(e)] == []
    assert [e for e in own if shared_failure(e)] == []


def test_data_error_is_an_items_own_data() -> None:
    data: list[BaseException] = [
        asyncpg.UntranslatableCharacterError(),
        asyncpg.CharacterNotInRepertoireError(),
        asyncpg.InvalidTextRepresentationError(),
        asyncpg.DataError("invalid input for query argument $1"),
        asyncpg.UniqueViolationError(),
        asyncpg.CheckViolationError(),
        IllegalTransitionError(),
        UnstorableValueError(),
        UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed"),
    ]
    other: list[BaseException] = [
        ConnectionResetError(),
        DatabaseUnavailableError(),
        asyncpg.SerializationError(),
        asyncpg.DeadlockDetectedError(),
        LeaseLostError(),
        DedupeRaceError(),
        RuntimeError(),
    ]
    assert [e for e in data if not data_error(e)] == []
    assert [e for e in other if data_error(e)] == []
