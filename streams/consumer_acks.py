"""A consumer's acknowledgements: gathered for a moment, then sent in one XACK pipeline."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from awooop.streams.consumer_stats import ConsumerStats
from awooop.streams.consumer_tasks import sleep_or_stop

ACK_LINGER_S = 0.02  # how long acknowledgements gather before one XACK (see Acks.loop)

LogError = Callable[[str, BaseException], None]


class Acks:
    """Entry ids handled successfully, per stream, waiting for their XACK."""

    def __init__(self, redis: Any, group: str, stats: ConsumerStats, log_error: LogError) -> None:
        self.redis = redis
        self.group = group
        self.stats = stats
        self.log_error = log_error
        self._pending: dict[str, list[str]] = {}
        self._wakeup = asyncio.Event()

    def add(self, stream: str, entry_id: str) -> None:
        self._pending.setdefault(stream, []).append(entry_id)
        self._wakeup.set()

    def drop(self, stream: str) -> None:
        """The stream was rebuilt (a new epoch): its old entry ids mean nothing there now."""
        self._pending.pop(stream, None)

    def wake(self) -> None:
        self._wakeup.set()

    async def flush(self) -> None:
        if not self._pending:
            return
        acks, self._pending = self._pending, {}
        try:
            pipe = self.redis.pipeline(transaction=False)
            for stream, ids in acks.items():
                pipe.xack(stream, self.group, *ids)
            await pipe.execute()
            self.stats.acked += sum(len(ids) for ids in acks.values())
        except Exception as exc:
            # The entries stay pending and come back through reclaim: duplicates, not loss.
            # Any exception, not only RedisError: redis-py 8.1 can leak AttributeError or
            # TypeError from a connection the server reset (redis/redis-py#4287; seen after a
            # cluster master restart), and a dead ack loop would leave every later entry pending.
            self.log_error("stream_ack_failed", exc)

    async def loop(self, halt: asyncio.Event) -> None:
        while not halt.is_set():
            await self._wakeup.wait()
            # Acks are not on anyone's way: let the next ones join this XACK. (An entry left
            # pending that much longer is at worst redelivered after a crash: a duplicate.)
            await sleep_or_stop(ACK_LINGER_S, halt)
            self._wakeup.clear()
            await self.flush()
