"""Burst mode (:meth:`awooop.worker.runtime.Worker.run_until_idle`): claim and run everything
runnable now through the polling path, at any age, then return. For tests and one-shot jobs:
no stream intake, no local timers, the heartbeat and cancel listener only while it runs."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, Protocol

from awooop.worker.cancels import CancelListener
from awooop.worker.executor import Executor
from awooop.worker.heartbeat import Heartbeat
from awooop.worker.isolation import Isolation
from awooop.worker.tasks import finish


class Burstable(Protocol):
    """What burst mode uses of a worker (:class:`awooop.worker.runtime.Worker`)."""

    heartbeat: Heartbeat
    cancel_listener: CancelListener
    executor: Executor
    isolation: Isolation

    @property
    def slot_freed(self) -> asyncio.Event: ...

    @property
    def tasks(self) -> set[asyncio.Task[Any]]: ...

    async def poll_once(self, min_age_s: float | None = None) -> int: ...

    def free_slots(self) -> int: ...


async def run_until_idle(worker: Burstable, *, max_s: float = 60.0) -> int:
    """Run what is runnable until nothing is (or ``max_s``); return the attempts run."""
    heart_stop = asyncio.Event()
    await worker.heartbeat.open(heart_stop)  # the worker's session, before its first claim
    heart = asyncio.ensure_future(worker.heartbeat.run(heart_stop))
    listener = asyncio.ensure_future(worker.cancel_listener.run(heart_stop))
    total = 0
    deadline = time.monotonic() + max_s
    try:
        while time.monotonic() < deadline:
            worker.slot_freed.clear()
            claimed = await worker.poll_once(0.0)
            total += claimed
            # An attempt that ended during the poll may have made a run runnable (a child's end
            # resumes its parent) after the claim's transaction began: its ``now()`` is older
            # than that run's ``updated_at``, so the claim skipped it. Poll again before idling.
            ended_meanwhile = worker.slot_freed.is_set()
            if claimed == 0 and not worker.executor.attempts and not ended_meanwhile:
                alone = await worker.isolation.run_suspects(drain_s=0.0)  # nothing in flight
                if alone <= 0:
                    break
                total += alone
            if claimed == 0 or worker.free_slots() == 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(worker.slot_freed.wait(), timeout=0.05)
        if worker.tasks:
            await asyncio.wait(set(worker.tasks), timeout=max(0.1, deadline - time.monotonic()))
    finally:
        heart_stop.set()
        await finish([heart, listener], wait_s=10)
    return total
