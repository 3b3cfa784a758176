"""Readers of run output on one server process: the stream caps, the reads, and the events.

:class:`OutputReaders` is shared by the API's route and the console's
(:mod:`awooop.http.output`); what one reader costs is bounded:

- **Streams**: at most ``AWOOOP_OUTPUT_STREAMS_PER_PROJECT`` streams of one project (the
  project whose run is read) and ``AWOOOP_OUTPUT_STREAMS`` in all are open at once in a
  process; one more is refused with 429 ``E-OUTPUT-001`` / ``E-OUTPUT-002`` and
  ``Retry-After`` before it reads anything (:class:`StreamSlots`). An open stream holds no
  share of the project's management requests (``AWOOOP_HTTP_TENANT_REQUESTS``: it is given
  back once the stream starts) and no database connection while it waits.
- **Time**: a stream ends after ``AWOOOP_OUTPUT_STREAM_MAX_S`` (the client resumes with
  ``Last-Event-ID``), and each event must be taken by the client within
  :data:`awooop.http.sse.SEND_TIMEOUT_S`.
- **Reads**: one page at a time per stream (:data:`awooop.runs.output_log.PAGE_ROWS` rows,
  each at most ``AWOOOP_OUTPUT_FLUSH_BYTES``: nothing else is buffered for a client), each a
  tenant transaction bounded by ``AWOOOP_HTTP_STATEMENT_TIMEOUT_S``, and at most half the
  process's pool (``AWOOOP_HTTP_DB_POOL_SIZE``) of them at once, so management requests always
  find connections. A read that cannot be had in time (Postgres away, busy or silent) ends the
  stream with an ``error`` event naming the code; the client reconnects.
- **Waiting**: between reads a stream waits for the bell
  (:class:`awooop.runs.output_bell.OutputBell`: one ``LISTEN`` connection for the process) or
  at most ``AWOOOP_OUTPUT_POLL_S``.
- **Shutdown**: when the server starts to stop (``Services.stopping``), every stream ends at
  its next wait; its client resumes on another server with ``Last-Event-ID``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
import uuid
from collections.abc import AsyncIterator

from awooop.core import metrics
from awooop.core.errors import (
    AwoooPError,
    DatabaseBusyError,
    OutputStreamsExceededError,
    ServerOutputStreamsExceededError,
)
from awooop.core.logs import get_logger
from awooop.core.retries import CONNECTION_ERRORS, unavailable
from awooop.http import sse
from awooop.runs import output_log
from awooop.runs.output_bell import OutputBell
from awooop.runs.output_rules import Abandoned, Chunk, End, Follow, Item, Page
from awooop.services import Services

log = get_logger(__name__)

KEEPALIVE_S = 15.0  # a comment line after this long without an event
RETRY_MS = 2000  # the reconnect delay a stream asks of its client
READ_MARGIN_S = 2.0  # a read's client-side bound: the statement's, and this for the round trip


class StreamSlots:
    """Open streams per project and in all, against the two caps (one per process)."""

    def __init__(self, per_project: int, total: int) -> None:
        self.per_project = per_project
        self.total = total
        self.open: collections.Counter[str] = collections.Counter()

    def take(self, project_id: str) -> None:
        try:
            self._take(project_id)
        except (ServerOutputStreamsExceededError, OutputStreamsExceededError):
            metrics.OUTPUT_STREAMS_REFUSED.inc()
            raise
        metrics.OUTPUT_STREAMS.inc()

    def _take(self, project_id: str) -> None:
        if sum(self.open.values()) >= self.total:
            raise ServerOutputStreamsExceededError(
                f"this server already serves {self.total} output streams (AWOOOP_OUTPUT_STREAMS)"
            )
        if self.open[project_id] >= self.per_project:
            raise OutputStreamsExceededError(
                f"project {project_id} already reads {self.per_project} output streams on this "
                "server (AWOOOP_OUTPUT_STREAMS_PER_PROJECT)"
            )
        self.open[project_id] += 1

    def give_back(self, project_id: str) -> None:
        metrics.OUTPUT_STREAMS.dec()
        self.open[project_id] -= 1
        if self.open[project_id] <= 0:
            del self.open[project_id]


def encoded(item: Item) -> bytes:
    """Pure: the server-sent event of what a reader is told."""
    match item:
        case Chunk(truncated=True):
            return sse.event(
                "truncated",
                {"seq": item.seq, "attempt": item.attempt, "offset": item.offset},
                item.seq,
            )
        case Chunk():
            data = {
                "seq": item.seq,
                "attempt": item.attempt,
                "offset": item.offset,
                "end": item.end,
                "text": item.text,
                "at": item.at,
            }
            return sse.event("output", data, item.seq)
        case Abandoned():
            return sse.event("abandoned", {"attempt": item.attempt, "by": item.by})
        case End():
            return sse.event("end", {"status": item.status, "attempt": item.attempt})


class OutputReaders:
    def __init__(self, services: Services) -> None:
        settings = services.settings
        self.services = services
        self.settings = settings
        self.slots = StreamSlots(settings.output_streams_per_project, settings.output_streams)
        self.bell = OutputBell(settings.database_url)
        self.reads = asyncio.Semaphore(max(1, settings.http_db_pool_size // 2))
        self.bound_s = settings.http_statement_timeout_s
        self.stopping = services.stopping

    async def read(self, project_id: str, run_id: uuid.UUID, after: int, limit: int) -> Page | None:
        """One page of the run's log after ``after`` (None: no such run of the project)."""
        try:
            await asyncio.wait_for(self.reads.acquire(), self.bound_s)
        except TimeoutError:
            raise DatabaseBusyError("too many output reads at once on this server") from None
        try:
            # The statement is bounded on the server (the request's bound); this bounds the
            # whole read on the client too, for a server that never answers.
            return await asyncio.wait_for(
                self.services.db.in_tenant(
                    project_id, lambda conn: output_log.page(conn, run_id, after, limit)
                ),
                self.bound_s + READ_MARGIN_S,
            )
        except TimeoutError:
            raise DatabaseBusyError(
                f"an output read did not finish within {self.bound_s:g} s "
                "(AWOOOP_HTTP_STATEMENT_TIMEOUT_S)"
            ) from None
        finally:
            self.reads.release()

    async def open(self, project_id: str, run_id: uuid.UUID, after: int) -> Stream | None:
        """A stream of the run's output after ``after``, its slot taken and its first page
        read; None (slot given back) when there is no such run. Refusals: 429 (caps)."""
        self.slots.take(project_id)
        stream = Stream(self, project_id, run_id, after)
        try:
            if not await stream.start():
                stream.close()
                return None
        except BaseException:
            stream.close()
            raise
        return stream

    async def close(self) -> None:
        await self.bell.close()


class Stream:
    """One reader's stream: its slot, its watch on the bell, and its events."""

    def __init__(self, readers: OutputReaders, project_id: str, run_id: uuid.UUID, after: int):
        self.readers = readers
        self.project_id = project_id
        self.run_id = run_id
        self.follow = Follow(after)
        self._watch = contextlib.ExitStack()
        self.rung = self._watch.enter_context(readers.bell.watch(run_id))
        self.page: Page | None = None
        self._closed = False

    async def start(self) -> bool:
        self.page = await self._read()
        return self.page is not None

    async def _read(self) -> Page | None:
        self.rung.clear()  # a notice from now on is kept for the next wait
        return await self.readers.read(
            self.project_id, self.run_id, self.follow.position, output_log.PAGE_ROWS
        )

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._watch.close()
            self.readers.slots.give_back(self.project_id)

    async def _pause(self, timeout_s: float) -> None:
        """Until the bell rings for the run, the server starts to stop, or ``timeout_s``."""
        waits = [
            asyncio.ensure_future(self.rung.wait()),
            asyncio.ensure_future(self.readers.stopping.wait()),
        ]
        try:
            await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()

    async def events(self) -> AsyncIterator[bytes]:
        settings = self.readers.settings
        deadline = time.monotonic() + settings.output_stream_max_s
        quiet_since = time.monotonic()
        yield sse.retry(RETRY_MS)
        page = self.page
        while page is not None:
            for item in self.follow.take(page):
                yield encoded(item)
                quiet_since = time.monotonic()
            if self.follow.done:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                return  # the client resumes with Last-Event-ID
            if not page.more:
                await self._pause(min(settings.output_poll_s, left))
            if self.readers.stopping.is_set():
                return  # the server stops: the client resumes elsewhere with Last-Event-ID
            if time.monotonic() - quiet_since >= KEEPALIVE_S:
                yield sse.comment("keep-alive")
                quiet_since = time.monotonic()
            try:
                page = await self._read()
            except AwoooPError as exc:
                yield sse.event("error", {"code": exc.code, "message": exc.message})
                return
            except CONNECTION_ERRORS as exc:
                typed = unavailable(exc, "the database")
                log.info("output_stream_read_failed", code=typed.code, error=repr(exc)[:300])
                yield sse.event("error", {"code": typed.code, "message": typed.message})
                return
