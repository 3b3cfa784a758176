"""The doorbell of output readers: ONE ``LISTEN`` connection per process for all of them.

A flush of a run's output rings :data:`awooop.runs.output_log.CHANNEL` when it commits (payload:
the run id), and so does an attempt's end once its last event is written; an operator's cancel
rings :data:`awooop.runs.control.CANCEL_CHANNEL`. :class:`OutputBell` listens on both and wakes
the readers waiting on that run (:meth:`OutputBell.watch`); a reader then reads from Postgres.
A notice is a doorbell, never data: any database login can ``pg_notify`` any channel, so a
notice only makes a reader read (under its own tenant's row-level security), and a forged or
lost one costs one read or a delay of one poll. Readers wait at most ``AWOOOP_OUTPUT_POLL_S``
for a notice and then read anyway, so the bell is never needed for correctness: while its
connection is down (it reconnects after a pause) readers poll.

The connection is opened at the first :meth:`~OutputBell.watch` (never when the routes are
built) by a task with a context of its own (no request's log context), and closed by
:meth:`~OutputBell.close`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import uuid
from collections.abc import Iterator

from awooop.core.listening import listen
from awooop.core.logs import get_logger
from awooop.runs.control import CANCEL_CHANNEL
from awooop.runs.output_log import CHANNEL

log = get_logger(__name__)

RECONNECT_PAUSE_S = 1.0
CONNECT_TIMEOUT_S = 10.0


class OutputBell:
    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self.connected = asyncio.Event()
        self.waiters: dict[uuid.UUID, set[asyncio.Event]] = {}
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    @contextlib.contextmanager
    def watch(self, run_id: uuid.UUID) -> Iterator[asyncio.Event]:
        """An event set whenever a notice names ``run_id``, for the block's length (the
        reader clears it before each read, so a notice during a read is not lost)."""
        self._start()
        rung = asyncio.Event()
        self.waiters.setdefault(run_id, set()).add(rung)
        try:
            yield rung
        finally:
            waiting = self.waiters.get(run_id)
            if waiting is not None:
                waiting.discard(rung)
                if not waiting:
                    del self.waiters[run_id]

    def ring(self, payload: object) -> None:
        """Wake the readers of the run ``payload`` names (anything else is ignored)."""
        try:
            run_id = uuid.UUID(str(payload))
        except ValueError:
            return
        for rung in self.waiters.get(run_id, ()):
            rung.set()

    def _notified(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        self.ring(payload)

    def _start(self) -> None:
        if self._task is None and not self._stop.is_set():
            self._task = asyncio.get_running_loop().create_task(
                self._listen(), name="output-bell", context=contextvars.Context()
            )

    async def _listen(self) -> None:
        channels = {CHANNEL: self._notified, CANCEL_CHANNEL: self._notified}
        await listen(
            self.database_url,
            channels,
            self._stop,
            self.connected,
            name="output_bell",
            timeout_s=CONNECT_TIMEOUT_S,
            pause_s=RECONNECT_PAUSE_S,
            on_connected=self._wake_all,  # notices may have been missed while it was away
        )

    def _wake_all(self) -> None:
        for waiting in self.waiters.values():
            for rung in waiting:
                rung.set()

    async def close(self) -> None:
        self._stop.set()
        task, self._task = self._task, None
        if task is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, timeout=10)
