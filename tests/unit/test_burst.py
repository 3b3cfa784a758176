"""Burst mode's loop (awooop.worker.burst) against a scripted worker: when it stops polling."""

from __future__ import annotations

import asyncio
from typing import Any

from awooop.worker import burst


class Scripted:
    """A worker whose polls follow ``script``: each entry is (runs claimed, whether an attempt
    ended while the poll was under way). Attempts end as soon as they start."""

    def __init__(self, script: list[tuple[int, bool]]) -> None:
        self.script = list(script)
        self.polls = 0
        self.suspect_runs = 0
        self.executor = self
        self.isolation = self
        self.heartbeat = self
        self.cancel_listener = self
        self.attempts: dict[Any, Any] = {}
        self.tasks: set[asyncio.Task[Any]] = set()
        self.slot_freed = asyncio.Event()

    async def run(self, stop: asyncio.Event) -> None:
        await stop.wait()

    async def open(self, stop: asyncio.Event) -> None:
        """The heartbeat's session: none here."""

    async def run_suspects(self, drain_s: float) -> int:
        self.suspect_runs += 1
        return 0

    async def poll_once(self, min_age_s: float | None = None) -> int:
        self.polls += 1
        claimed, ended = self.script.pop(0) if self.script else (0, False)
        if ended or claimed:
            self.slot_freed.set()
        return claimed

    def free_slots(self) -> int:
        return 1


async def test_an_attempt_that_ended_during_an_empty_poll_gets_another_poll() -> None:
    """The empty poll's transaction began before the ended attempt resumed a run (its
    ``now()`` is older than the run's ``updated_at``): one more poll takes that run."""
    worker = Scripted([(0, True), (1, False)])
    assert await burst.run_until_idle(worker, max_s=5) == 1  # type: ignore[arg-type]
    assert worker.polls == 3 and worker.suspect_runs == 1


async def test_an_empty_poll_with_nothing_ended_ends_the_burst() -> None:
    worker = Scripted([(2, False), (0, False), (1, False)])
    assert await burst.run_until_idle(worker, max_s=5) == 2  # type: ignore[arg-type]
    assert worker.polls == 2 and worker.suspect_runs == 1
