"""``run.emit_output(text)``: an attempt's streamed output, buffered and flushed in rows.

:class:`OutputBuffer` holds what the attempt's handler emitted and a flusher task (started at
the first emit) writes it to the run's output log (:func:`awooop.runs.output_log.append`), one
row per flush: at once for the attempt's first text, then when
``AWOOOP_OUTPUT_FLUSH_BYTES`` wait or at most every ``AWOOOP_OUTPUT_FLUSH_INTERVAL_S`` (the
coalescing rules: :class:`awooop.runs.output_rules.Coalescer`). Every flush is fenced: only
while the attempt holds its lease (by its own clock, and by the database's in the statement),
so a fenced-off attempt appends nothing.

- **The attempt's end**: the executor closes the buffer when the handler ends, before the
  attempt's last event is written (:meth:`close`: everything left is flushed; a flush that
  fails there fails like the handler raising that error: lease lost, or Postgres away and the
  attempt handed back), so a reader that sees the run finished has all its output. A
  ``wait_for_approval`` flushes first too (the approval request ends the lease). A handler
  that raised has its output flushed as well (:meth:`close_quietly`), and so does one stopped
  by a shutdown while the lease holds; once the run's end is written, readers are rung
  (:meth:`ring_end`).
- **Bounded**: ``emit_output`` waits while four rows' worth of text waits for the flusher, so
  a handler cannot outrun Postgres; past ``AWOOOP_OUTPUT_MAX_BYTES`` for the run (all its
  attempts together) the output is cut on a character boundary, a truncation marker row is
  written once and later text is dropped (one ``run_output_truncated`` log line).
- **Errors**: text Postgres cannot store (NUL, a lone surrogate) is refused at the emit with
  E-DATA-001 and nothing is kept; a flush refused by the fence makes the next emit raise
  E-RUN-002 (``LeaseLostError``), Postgres away E-DB-001 (the attempt is handed back
  uncharged, as for a step).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from typing import Protocol

from awooop.core import metrics
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import LeaseLostError, UnstorableValueError
from awooop.core.logs import get_logger
from awooop.core.retries import unavailable_on_store_errors
from awooop.core.storable import problem
from awooop.runs import output_log
from awooop.runs.output_rules import Coalescer, fit, utf8_len
from awooop.worker.attempts import Attempt, StopReason

log = get_logger("awooop.worker")

HIGH_WATER_ROWS = 4  # an emit waits while this many rows' worth of text waits for the flusher


class OutputSink(Protocol):
    """What ``run.emit_output`` writes to (the worker's :class:`OutputBuffer`, or the test
    kit's memory)."""

    async def emit(self, text: str) -> None: ...
    async def flush(self) -> None: ...


def checked(text: object) -> str:
    """Pure: ``text`` if it is text Postgres can store; else TypeError or E-DATA-001."""
    if not isinstance(text, str):
        raise TypeError(f"run.emit_output takes a str, not {type(text).__name__}")
    refused = problem(text, "the output")
    if refused is not None:
        raise UnstorableValueError(refused)
    return text


class OutputBuffer:
    def __init__(self, *, attempt: Attempt, db: Database, settings: Settings) -> None:
        self.attempt = attempt
        self.db = db
        self.max_bytes = settings.output_max_bytes
        self._interval_s = settings.output_flush_interval_s
        self._flush_bytes = settings.output_flush_bytes
        self.high_water = HIGH_WATER_ROWS * settings.output_flush_bytes
        self.written = 0  # rows this attempt wrote
        self.full = False  # the run's output reached its limit: later text is dropped
        self._at: int | None = None  # the run's output bytes, once a flush told
        self._error: BaseException | None = None
        self._urgent = False
        self._closing = False
        self._writing = False  # a row is on its way (taken out of the coalescer)
        self._task: asyncio.Task[None] | None = None
        # Made with the flusher task (most attempts emit nothing: an attempt in flight holds
        # no event of its own): text came (or a flush is asked for); a flush ended (or failed).
        self._more: asyncio.Event
        self._moved: asyncio.Event

    @functools.cached_property
    def coalescer(self) -> Coalescer:
        """Made at the first emit (most attempts emit nothing: one in flight holds none)."""
        return Coalescer(interval_s=self._interval_s, flush_bytes=self._flush_bytes)

    # --- the handler's side ------------------------------------------------------------------

    async def emit(self, text: str) -> None:
        if self._error is not None:
            raise self._error
        if self._closing:
            raise RuntimeError("run.emit_output after the attempt ended")
        if self.full or not text:
            return
        self.coalescer.add(text)
        if self._task is None:
            self._more, self._moved = asyncio.Event(), asyncio.Event()
            self._task = asyncio.ensure_future(self._flushing())
        self._more.set()
        while self.coalescer.pending_bytes >= self.high_water and self._error is None:
            self._moved.clear()
            await self._moved.wait()
        if self._error is not None:
            raise self._error

    async def flush(self) -> None:
        """Write everything emitted so far (before a write that ends the lease)."""
        if self._task is None:
            return
        self._urgent = True
        try:
            while (
                (self.coalescer.pending or self._writing)
                and self._error is None
                and not self._task.done()
            ):
                self._moved.clear()
                self._more.set()
                await self._moved.wait()
        finally:
            self._urgent = False
        if self._error is not None:
            raise self._error

    async def close(self) -> None:
        """The handler returned: flush what is left and stop; raises what a flush raised."""
        try:
            await self.flush()
        finally:
            await self._stop()

    async def close_quietly(self) -> None:
        """The handler raised or was stopped: flush what is left while the lease holds (a
        shutdown), else drop it; errors are logged, the handler's own error stands."""
        try:
            if self._may_write(self.attempt.stop_reason in (None, StopReason.SHUTDOWN)):
                await self.flush()
        except Exception as exc:
            log.warning("run_output_not_flushed", run_id=str(self.attempt.run_id), error=repr(exc))
        finally:
            await self._stop()

    async def ring_end(self, notify: output_log.Notify) -> None:
        """The attempt's last event is written: ring the run's readers (when it wrote output;
        best effort, readers poll anyway)."""
        if self.written == 0:
            return
        try:
            await notify([str(self.attempt.run_id)])
        except Exception as exc:
            log.info("run_output_ring_failed", run_id=str(self.attempt.run_id), error=repr(exc))

    # --- the flusher ---------------------------------------------------------------------------

    def _may_write(self, allowed: bool = True) -> bool:
        return allowed and time.monotonic() < self.attempt.lease_deadline

    async def _flushing(self) -> None:
        try:
            while True:
                delay = self.coalescer.due_in(
                    time.monotonic(), urgent=self._urgent or self._closing
                )
                if delay is None:
                    self._moved.set()  # idle: a flush() waiting for it looks again
                    if self._closing:
                        return
                if delay is None or delay > 0:
                    self._more.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._more.wait(), timeout=delay)
                    continue
                self._writing = True
                try:
                    await self._write_next()
                finally:
                    self._writing = False
                self._moved.set()
        except Exception as exc:
            self._error = exc
        finally:
            self._moved.set()

    async def _write_next(self) -> None:
        if not self._may_write(self.attempt.stop_reason in (None, StopReason.SHUTDOWN)):
            raise LeaseLostError(
                "the attempt no longer holds its lease", run_id=self.attempt.run_id
            )
        text = self.coalescer.take(time.monotonic())
        if self._at is not None:
            text, cut = fit(text, self._at, self.max_bytes)
            if cut:
                await self._truncate(text)
                return
        found = await self._append(text, truncated=False)
        if found.written is not None:
            self._at = found.at + utf8_len(text)
        elif found.truncated:  # an earlier attempt reached the limit
            self._drop()
        else:  # over the limit: what fits, then the marker
            self._at = found.at
            await self._truncate(fit(text, found.at, self.max_bytes)[0])

    async def _truncate(self, head: str) -> None:
        if head:
            await self._append(head, truncated=False)
        await self._append("", truncated=True)
        metrics.OUTPUT_TRUNCATED.inc()
        log.warning(
            "run_output_truncated", run_id=str(self.attempt.run_id), max_bytes=self.max_bytes
        )
        self._drop()

    def _drop(self) -> None:
        self.full = True
        self.coalescer.clear()

    async def _append(self, text: str, *, truncated: bool) -> output_log.Appended:
        a = self.attempt
        with unavailable_on_store_errors("an output flush failed"):
            found = await self.db.in_run_statement(
                lambda conn: output_log.append(
                    conn,
                    a.run_id,
                    a.worker_id,
                    a.number,
                    text,
                    utf8_len(text),
                    truncated=truncated,
                    max_bytes=self.max_bytes,
                )
            )
        if not found.held:
            raise LeaseLostError(
                "output refused: the attempt no longer holds its lease", run_id=a.run_id
            )
        if found.written is not None:
            self.written += 1
            metrics.OUTPUT_ROWS.inc()
        return found

    async def _stop(self) -> None:
        self._closing = True
        task = self._task
        if task is not None:
            self._more.set()
        if task is not None and not task.done():
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(task), timeout=1.0)
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
