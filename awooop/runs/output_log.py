"""Streamed run output in Postgres (the table ``awooop_run_output``): the fenced append
of one flush, a reader's page, and retention. The rules (coalescing, the limit, resuming,
following) are pure: :mod:`awooop.runs.output_rules`.

- :func:`append` is the worker's one statement per flush (``sql/output_append.sql``): the row
  is written only under the attempt's lease fence, after the run's last row, while it fits in
  the run's limit; its commit rings :data:`CHANNEL` (``pg_notify``, payload the run id), which
  the server's :class:`awooop.runs.output_bell.OutputBell` hears for every waiting reader.
- :func:`page` reads the run's status and its rows after a reader's position in one statement
  (``sql/output_page.sql``, one snapshot), in a tenant transaction: row-level security shows a
  project's own rows only.
- :func:`expire_once` deletes rows older than ``AWOOOP_OUTPUT_RETENTION_S`` in batches, from the
  ``dedupe_expiry`` loop (as :mod:`awooop.llm.flow_retention` does for its tables).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from awooop.core.db import Connection, Database
from awooop.core.logs import get_logger
from awooop.eventlog import queries
from awooop.eventlog.state import RunStatus
from awooop.runs.output_rules import Chunk, Page

log = get_logger(__name__)

APPEND = queries.load("output_append")
PAGE = queries.load("output_page")
EXPIRE = queries.load("output_expire")
CHANNEL = "awooop_run_output"  # written in output_append.sql too (a test holds them equal)

PAGE_ROWS = 64  # rows a reader's read returns at most (each at most AWOOOP_OUTPUT_FLUSH_BYTES)
MAX_PAGE_ROWS = 256  # the most a JSON read may ask for (?limit=)
BATCH = 1000
MAX_BATCHES = 50  # per retention pass: at most 50,000 rows a minute

# pg_notify of run ids on CHANNEL (the worker's RunStatements.notify, bound to the channel).
Notify = Callable[[list[str]], Awaitable[None]]


class Appended(msgspec.Struct, frozen=True):
    """What a flush found: whether the attempt held its lease (``held``), the log's head
    before it (``seq``, ``at`` bytes, ``truncated``), and the new row's seq (None: nothing
    written, because the fence refused, the limit was reached or a marker was there)."""

    held: bool
    seq: int
    at: int
    truncated: bool
    written: int | None


async def append(
    conn: Connection,
    run_id: uuid.UUID,
    worker_id: str,
    attempt: int,
    text: str,
    nbytes: int,
    *,
    truncated: bool,
    max_bytes: int,
) -> Appended:
    """One flush: ``text`` (``nbytes`` UTF-8 bytes) after the run's last row, or the
    truncation marker (``truncated``, empty text), under the fence (see the module docstring)."""
    row = await conn.fetchrow(
        APPEND, run_id, worker_id, attempt, text, nbytes, truncated, max_bytes
    )
    assert row is not None  # the statement always answers one row
    return Appended(
        held=bool(row["held"]),
        seq=int(row["seq"]),
        at=int(row["at"]),
        truncated=bool(row["truncated"]),
        written=None if row["written"] is None else int(row["written"]),
    )


async def page(conn: Connection, run_id: uuid.UUID, after: int, limit: int) -> Page | None:
    """The run's status and attempt count and its rows after ``after`` (at most ``limit``);
    ``before`` is the row at ``after`` when it is still kept. None: no such run (here)."""
    rows = await conn.fetch(PAGE, run_id, after, limit + 2)  # the row at ``after``, one more
    if not rows:
        return None
    first = rows[0]
    chunks = [_chunk(r) for r in rows if r["seq"] is not None]
    before = chunks.pop(0) if chunks and chunks[0].seq == after else None
    more = len(chunks) > limit
    return Page(
        status=RunStatus(first["status"]),
        attempt=int(first["attempt_count"]),
        rows=chunks[:limit],
        before=before,
        more=more,
    )


def _chunk(row: Any) -> Chunk:
    return Chunk(
        seq=int(row["seq"]),
        attempt=int(row["attempt"]),
        offset=int(row["start_offset"]),
        end=int(row["end_offset"]),
        text=str(row["text"]),
        at=row["created_at"],
        truncated=bool(row["truncated"]),
    )


async def expire_once(
    db: Database, retention_s: float, *, batch: int = BATCH, max_batches: int = MAX_BATCHES
) -> int:
    """One retention pass: rows written longer than ``retention_s`` ago are deleted, at most
    ``batch`` per short platform transaction and ``max_batches`` per pass; how many."""
    deleted = 0
    for _ in range(max_batches):
        rows = await db.in_platform_writes(lambda conn: conn.fetch(EXPIRE, retention_s, batch))
        deleted += len(rows)
        if len(rows) < batch:
            break
    if deleted:
        log.info("run_output_expired", retention_s=retention_s, rows=deleted)
    return deleted
