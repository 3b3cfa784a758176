"""The replay's bulk pass: fold a range of streams from a snapshot into shadow tables.

:func:`fold_range` reads the events of the streams in [low, high) in (stream_id, version)
order through a server-side cursor (pipelined: the next FETCH runs on the server while this
batch is folded), folds one stream at a time with the projection's ``bulk_stream`` and writes
the rows with COPY on a second connection, through a bounded queue: memory holds one stream
and a few batches, never the log.

With several workers, the stream range is split and each part is folded by its own process
(:func:`run_worker`) inside the snapshot the parent exported (``SET TRANSACTION SNAPSHOT``), so
all parts see exactly the same log. Rows that aggregate over streams (``bulk_finish``, e.g.
runs per project and state) come back to the parent, which merges and writes them once.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from awooop.core.db import Connection
from awooop.core.errors import ArchivedHeadError, ProjectionStreamError
from awooop.core.pools import PLATFORM_ROLE, connect
from awooop.projections.base import (
    AppliesInBulk,
    BulkOutput,
    LogEvent,
    Projection,
    TableNames,
    decode_payload,
)

_json_encode = msgspec.json.Encoder().encode
_json_decode = msgspec.json.Decoder().decode
JSONB_BINARY_VERSION = b"\x01"
HEX = "0123456789abcdef"
SNAPSHOT_ID = re.compile(r"^[0-9A-F]+-[0-9A-F]+(-[0-9]+)?$")

# data as jsonb: the reader's codec hands its JSON bytes straight to the event decoder.
_EVENTS = """
SELECT stream_id, version, project_id, position, event_type, data,
       metadata->>'traceparent' AS traceparent
FROM {table}
WHERE stream_id >= $1 AND stream_id < $2 AND ($3::text IS NULL OR project_id = $3)
"""
# A stream whose first events are archived starts from its snapshot: a row at version 0 (first
# in its stream) whose position column carries the snapshot's version and data its state.
SNAPSHOT_EVENT = "$snapshot"
_SNAPSHOTS = """
SELECT stream_id, 0, project_id, version::bigint, '$snapshot', state, NULL
FROM awooop_stream_snapshots
WHERE stream_id >= $1 AND stream_id < $2 AND ($3::text IS NULL OR project_id = $3)
"""
BULK = _SNAPSHOTS + "UNION ALL" + _EVENTS.format(table="awooop_events") + "ORDER BY 1, 2"
# The same rows for a list of streams ($1), by the streams' keys (replay --tail).
SNAPSHOTS_OF_STREAMS = """
SELECT stream_id, 0, project_id, version::bigint, '$snapshot', state, NULL
FROM awooop_stream_snapshots WHERE stream_id = ANY($1::text[])
UNION ALL
SELECT stream_id, version, project_id, position, event_type, data,
       metadata->>'traceparent' AS traceparent
FROM awooop_events WHERE stream_id = ANY($1::text[])
ORDER BY 1, 2
"""


def bulk_query(archive_table: str | None) -> str:
    """The bulk pass's read: the live log after the snapshots, or (with the archive restored
    into ``archive_table``, a name the replay chose) the archived events before the live log."""
    if archive_table is None:
        return BULK
    return (
        _EVENTS.format(table=archive_table)
        + "UNION ALL"
        + _EVENTS.format(table="awooop_events")
        + "ORDER BY 1, 2"
    )


class Snapshot(msgspec.Struct, frozen=True):
    stream_id: str
    version: int
    state: bytes | None


def resume_stream(
    projection: Projection, snapshot: Snapshot, events: Sequence[LogEvent], out: BulkOutput
) -> None:
    """Fold a stream from its snapshot, or refuse clearly when this projection cannot."""
    resume = getattr(projection, "bulk_resume", None)
    if resume is None or snapshot.state is None:
        raise ArchivedHeadError(
            f"stream {snapshot.stream_id}: its events up to version {snapshot.version} are "
            f"archived; replay {projection.name} with --from-archive DIR",
            stream_id=snapshot.stream_id,
        )
    resume(snapshot.state, events, out)


async def use_binary_json(conn: Connection) -> None:
    """Binary json/jsonb codecs (msgspec): COPY's binary protocol needs them."""
    await conn.set_type_codec(
        "jsonb",
        schema="pg_catalog",
        encoder=lambda value: JSONB_BINARY_VERSION + _json_encode(value),
        decoder=lambda data: _json_decode(data[1:]),
        format="binary",
    )
    await conn.set_type_codec(
        "json", schema="pg_catalog", encoder=_json_encode, decoder=_json_decode, format="binary"
    )


async def raw_jsonb(conn: Connection) -> None:
    """jsonb arrives as its JSON bytes (no str, no generic decode): the bulk reader's codec."""
    await conn.set_type_codec(
        "jsonb",
        schema="pg_catalog",
        encoder=lambda value: JSONB_BINARY_VERSION + _json_encode(value),
        decoder=lambda data: data[1:],
        format="binary",
    )


def to_log_event(r: Any, projection: Projection) -> LogEvent:
    """A row (stream_id, version, project_id, position, event_type, data, traceparent)."""
    if r[4] not in projection.event_types and not projection.skips_undeclared:
        raise ProjectionStreamError(
            f"stream {r[0]} v{r[1]}: event type {r[4]} is not declared by projection "
            f"{projection.name}",
            stream_id=r[0],
        )
    return LogEvent(
        stream_id=r[0],
        version=r[1],
        project_id=r[2],
        position=r[3],
        event_type=r[4],
        event=decode_payload(r[0], r[5]),
        traceparent=r[6],
    )


class StreamFolder:
    """Rows of the bulk read, in (stream_id, version) order, folded one stream at a time into
    ``out``: from its snapshot when the stream has one (events the snapshot covers skipped:
    archived, their partition not yet dropped), else from its first event."""

    def __init__(self, projection: Projection, out: BulkOutput) -> None:
        self.projection = projection
        self.out = out
        self.folded = 0  # events folded since the caller last reset it
        self._stream: str | None = None
        self._group: list[LogEvent] = []
        self._snapshot: Snapshot | None = None

    def add(self, r: Any) -> None:
        if r[0] != self._stream:
            self.finish()
            self._stream = r[0]
        if r[4] == SNAPSHOT_EVENT:
            self._snapshot = Snapshot(r[0], r[3], r[5])
        elif self._snapshot is None or r[1] > self._snapshot.version:
            self._group.append(to_log_event(r, self.projection))

    def finish(self) -> None:
        """Fold the stream in hand (the caller calls it once more after the last row)."""
        if self._stream is None:
            return
        if self._snapshot is None:
            self.projection.bulk_stream(self._group, self.out)
        else:
            resume_stream(self.projection, self._snapshot, self._group, self.out)
        self.folded += len(self._group)
        self._stream, self._group, self._snapshot = None, [], None


def split_range(
    low: str, high: str, parts: int, histogram: Sequence[str] = ()
) -> list[tuple[str, str]]:
    """[low, high) cut into ``parts`` ranges, every id in exactly one of them. With the column's
    histogram (pg_stats.histogram_bounds of the stream ids, sorted) the cuts are its quantiles
    inside [low, high), so the parts hold about as many streams each whatever the ids look like
    (run ids are time-ordered: they share their first digits). Without enough of it: at hex
    digits after the prefix ``low``, even for random ids."""
    parts = max(1, parts)
    inside = [b for b in histogram if low < b < high]
    if len(inside) >= parts:
        cuts = sorted({inside[i * len(inside) // parts] for i in range(1, parts)})
    else:
        parts = min(parts, len(HEX))
        cuts = [low + HEX[i * len(HEX) // parts] for i in range(1, parts)]
    bounds = [low, *cuts, high]
    return list(itertools.pairwise(bounds))


@dataclass
class BulkResult:
    events: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    finish: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict)


async def fold_range(
    reader: Connection,
    writer: Connection,
    projection: Projection,
    shadows: TableNames,
    low: str,
    high: str,
    project: str | None,
    *,
    batch_rows: int,
    fetch_rows: int,
    on_batch: Callable[[int], None],
    write_finish: bool,
    archive_table: str | None = None,
) -> BulkResult:
    """Fold the streams in [low, high) (``reader`` is inside the snapshot's transaction)."""
    result = BulkResult()
    columns = {t.name: t.columns for t in projection.tables}
    queue: asyncio.Queue[tuple[str, list[tuple[Any, ...]]] | None] = asyncio.Queue(4)

    async def write() -> None:
        while (item := await queue.get()) is not None:
            table, rows = item
            if isinstance(projection, AppliesInBulk):
                await projection.bulk_write(writer, shadows, rows)
            else:
                await writer.copy_records_to_table(
                    shadows[table], records=rows, columns=columns[table]
                )
            result.rows[table] = result.rows.get(table, 0) + len(rows)

    writer_task = asyncio.create_task(write())

    async def put(item: tuple[str, list[tuple[Any, ...]]] | None) -> None:
        put_task = asyncio.ensure_future(queue.put(item))
        done, _ = await asyncio.wait({put_task, writer_task}, return_when=asyncio.FIRST_COMPLETED)
        if put_task not in done:
            put_task.cancel()
            writer_task.result()  # raises the writer's error
            raise RuntimeError("the shadow writer stopped")  # pragma: no cover

    async def flush(out: BulkOutput) -> None:
        for table, rows in out.rows.items():
            if rows:
                await put((table, rows))
        out.rows = {}

    try:
        out = BulkOutput()
        folder = StreamFolder(projection, out)
        cursor = await reader.cursor(bulk_query(archive_table), low, high, project)
        pending = asyncio.ensure_future(cursor.fetch(fetch_rows))
        try:
            while records := await pending:
                pending = asyncio.ensure_future(cursor.fetch(fetch_rows))
                await asyncio.sleep(0)  # send the next FETCH before the CPU work below
                for r in records:
                    folder.add(r)
                result.events += len(records)
                on_batch(len(records))
                if folder.folded >= batch_rows:
                    await flush(out)
                    folder.folded = 0
        finally:
            if not pending.done():
                pending.cancel()
            with contextlib.suppress(BaseException):
                await pending
        folder.finish()
        await flush(out)
        finish = BulkOutput()
        projection.bulk_finish(finish)
        if write_finish:
            await flush(finish)
        else:
            result.finish = finish.rows
        await put(None)
        await writer_task
    finally:
        if not writer_task.done():
            writer_task.cancel()
            with contextlib.suppress(BaseException):
                await writer_task
    return result


# --- worker processes ------------------------------------------------------------------------


@dataclass(frozen=True)
class RangeTask:
    """What one bulk worker process folds: a stream range of a projection, in the snapshot the
    parent exported, into the shadow tables (picklable: it crosses the spawn)."""

    url: str
    projection_name: str
    project: str | None
    low: str
    high: str
    snapshot_id: str
    shadows: dict[str, str]
    batch_rows: int
    fetch_rows: int
    archive_table: str | None = None


def run_worker(task: RangeTask, queue: Any, index: int) -> None:
    """Entry point of a bulk worker process: reports ("progress", n), then ("done", index,
    events, rows, finish) or ("error", index, error class name, message) on ``queue``."""
    from awooop.core.logs import configure_logging

    configure_logging("warning")
    try:
        result = asyncio.run(_worker(task, queue))
        queue.put(("done", index, result.events, result.rows, result.finish))
    except BaseException as exc:  # reported to the parent, which raises it
        queue.put(("error", index, type(exc).__name__, str(getattr(exc, "message", exc))))


async def _worker(task: RangeTask, queue: Any) -> BulkResult:
    from awooop.projections import registry

    if not SNAPSHOT_ID.match(task.snapshot_id):
        raise ValueError(f"not a snapshot id: {task.snapshot_id!r}")
    projection = registry.get(task.projection_name)
    reader = await connect(task.url, PLATFORM_ROLE)
    writer = await connect(task.url, PLATFORM_ROLE)
    try:
        await raw_jsonb(reader)
        await use_binary_json(writer)
        async with reader.transaction(isolation="repeatable_read", readonly=True):
            # Checked against SNAPSHOT_ID above; SET TRANSACTION takes no parameters.
            await reader.execute(f"SET TRANSACTION SNAPSHOT '{task.snapshot_id}'")
            return await fold_range(
                reader,
                writer,
                projection,
                TableNames(task.shadows),
                task.low,
                task.high,
                task.project,
                batch_rows=task.batch_rows,
                fetch_rows=task.fetch_rows,
                on_batch=lambda n: queue.put(("progress", n)),
                write_finish=False,
                archive_table=task.archive_table,
            )
    finally:
        await reader.close()
        await writer.close()
