"""The log's archive: an old partition written to a file (:mod:`awooop.eventlog.archive_files`), its
streams' snapshots kept, then the partition dropped.

**Archiving a partition** (:func:`archive_partition`), each step safe to repeat after a crash:

1. Refuse (E-ARCHIVE-002, nothing changed) unless the partition ended more than the retention
   ago, no run with an event in it is live (not COMPLETED, FAILED or CANCELLED), the relay has
   published every event in it, and every projector that runs here has applied them (which
   the caller's :data:`ProjectorLag` answers: projections sit above the log).
2. In one REPEATABLE READ snapshot, read its events in (stream_id, version) order, write the
   file (fsynced, then renamed into place), and fold every run stream from its snapshot (or
   from nothing) over its events: each stream's events must follow its snapshot's version
   without a gap, or the partition is refused.
3. One transaction: the new snapshots (awooop_stream_snapshots) and the catalogue row.
4. ``DETACH PARTITION ... CONCURRENTLY``: writers and readers go on. The detached table must
   hold exactly the events the file holds (a row written meanwhile re-attaches it and refuses).
5. ``DROP TABLE``.

A replay without the archive starts each run whose head was archived from its snapshot, and
skips events a snapshot already covers (a partition may be in the catalogue and still attached,
between steps 3 and 5). With ``--from-archive DIR`` it reads the files of every dropped
partition instead (:mod:`awooop.eventlog.archive_restore`), checked against their checksums and
the catalogue.
"""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from awooop.core.db import Connection
from awooop.core.errors import ArchiveRefusedError, IllegalTransitionError
from awooop.core.events import decode_event, run_id_of_stream, run_stream_sql
from awooop.core.logs import get_logger
from awooop.core.pools import PLATFORM_ROLE, connect
from awooop.eventlog.archive_files import (
    FORMAT,
    Header,
    Trailer,
    encode,
    event_line,
    file_name,
    persist,
    sha256_of,
    write_durably,
)
from awooop.eventlog.partition_ddl import DETACH_PENDING, EVENTS
from awooop.eventlog.partitions import Partition, due_for_archive, partitions
from awooop.eventlog.state import RunState, apply, decode_state, encode_state

log = get_logger(__name__)

FETCH_ROWS = 5_000

ProjectorLag = Callable[[Connection, str, datetime, datetime], Awaitable[str | None]]
"""What the projector named (as its loop heartbeat names it) has not applied yet of the events
recorded in [range_from, range_to), e.g. ``"stream run-..."``; None when it is caught up or is
no projector this build knows. Handed in by the caller (the projections sit above the log)."""

# --- SQL -------------------------------------------------------------------------------------
# Reads run as awooop_platform (BYPASSRLS): the login role may own the tables, and their
# row-level security is forced on the owner too.
SET_PLATFORM = f"SET LOCAL ROLE {PLATFORM_ROLE}"
MAY_ARCHIVE = """
SELECT pg_has_role(c.relowner, 'USAGE') FROM pg_class c WHERE c.oid = 'awooop_events'::regclass
"""
# Live: not in awooop.eventlog.state.TERMINAL.
LIVE_RUN = f"""
SELECT r.run_id, r.status
FROM awooop_events e
JOIN awooop_run_state r ON e.stream_id = {run_stream_sql("r.run_id")}
WHERE e.recorded_at >= $1 AND e.recorded_at < $2
  AND r.status NOT IN ('CANCELLED', 'COMPLETED', 'FAILED')
LIMIT 1
"""  # noqa: S608 - constant identifiers
UNPUBLISHED = """
SELECT e.position FROM awooop_events e, awooop_relay_cursor c
WHERE c.name = 'events' AND e.recorded_at >= $1 AND e.recorded_at < $2
  AND (e.tx_id, e.position) > (c.tx_id::text::xid8, c.position)
LIMIT 1
"""
# The projectors that run here (a loop heartbeat names them) must have applied the partition.
RUNNING_PROJECTORS = """
SELECT DISTINCT substr(loop_name, length('projector:') + 1) AS name
FROM awooop_loop_heartbeats WHERE loop_name LIKE 'projector:%'
"""
READ_PARTITION = """
SELECT e.position, e.tx_id::text::bigint AS tx_id, e.event_id, e.stream_id, e.version,
       e.project_id, e.event_type, e.data::text AS data, e.metadata::text AS metadata,
       e.recorded_at, s.version AS snapshot_version, s.state::text AS snapshot_state
FROM awooop_events e
LEFT JOIN awooop_stream_snapshots s ON s.stream_id = e.stream_id AND e.version = s.version + 1
WHERE e.recorded_at >= $1 AND e.recorded_at < $2
ORDER BY e.stream_id, e.version
"""
UPSERT_SNAPSHOTS = """
INSERT INTO awooop_stream_snapshots (stream_id, project_id, version, position, state)
SELECT * FROM unnest($1::text[], $2::text[], $3::int[], $4::bigint[], $5::text[]::jsonb[])
ON CONFLICT (stream_id) DO UPDATE
SET version = EXCLUDED.version, position = EXCLUDED.position, state = EXCLUDED.state,
    taken_at = now()
WHERE awooop_stream_snapshots.version < EXCLUDED.version
"""
UPSERT_CATALOGUE = """
INSERT INTO awooop_log_archives (partition_name, range_from, range_to, events, first_position,
                                 last_position, file_name, sha256)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (partition_name) DO UPDATE
SET events = EXCLUDED.events, first_position = EXCLUDED.first_position,
    last_position = EXCLUDED.last_position, file_name = EXCLUDED.file_name,
    sha256 = EXCLUDED.sha256, archived_at = now()
"""
CATALOGUE = """
SELECT partition_name, range_from, range_to, events, file_name, sha256
FROM awooop_log_archives ORDER BY range_from
"""
DELETE_CATALOGUE = "DELETE FROM awooop_log_archives WHERE partition_name = $1"
# Archived partitions whose table was detached and not yet dropped (a crash between steps).
DETACHED = """
SELECT a.partition_name FROM awooop_log_archives a
JOIN pg_class c ON c.relname = a.partition_name AND NOT c.relispartition
"""
STATEMENT_TIMEOUT = "SET statement_timeout = '{ms}'"


# --- snapshots: the pure fold ----------------------------------------------------------------


@dataclass
class StreamFold:
    """The archived events of one stream, checked to follow its snapshot."""

    stream_id: str
    project_id: str
    base_version: int  # the snapshot's version (0: none)
    version: int = 0
    position: int = 0
    state: RunState | None = None
    is_run: bool = False
    problem: str | None = None

    def add(self, version: int, position: int, data: str) -> None:
        expected = (self.version or self.base_version) + 1
        if version != expected:
            self.problem = f"stream {self.stream_id}: version {version} where {expected} was due"
            return
        self.version, self.position = version, position
        if self.is_run:
            try:
                self.state = apply(self.state, decode_event(data))
            except IllegalTransitionError as exc:
                self.problem = f"stream {self.stream_id} v{version}: {exc.message}"


def start_fold(
    stream_id: str, project_id: str, snapshot: tuple[int, str | None] | None
) -> StreamFold:
    base, state = snapshot if snapshot is not None else (0, None)
    is_run = run_id_of_stream(stream_id) is not None
    return StreamFold(
        stream_id=stream_id,
        project_id=project_id,
        base_version=base,
        state=decode_state(state) if (is_run and state is not None) else None,
        is_run=is_run,
    )


@dataclass
class ArchiveResult:
    partition: str
    events: int = 0
    streams: int = 0
    file: Path | None = None
    sha256: str = ""
    first_position: int | None = None
    last_position: int | None = None
    dropped: bool = False
    snapshots: list[tuple[str, str, int, int, str | None]] = field(default_factory=list)


# --- archiving -------------------------------------------------------------------------------


async def archive_due(
    url: str,
    directory: Path,
    *,
    retention: timedelta,
    projector_lag: ProjectorLag,
    lock_timeout_s: float = 5.0,
) -> ArchiveResult | None:
    """Archive and drop the oldest partition if it is due (None when none is); finishes a
    partition a crash left detached first."""
    conn = await connect(url)
    try:
        await _finish_detached(conn)
        async with conn.transaction():
            await conn.execute(SET_PLATFORM)
            parts = await partitions(conn)
            now = await conn.fetchval("SELECT now()")
        part = due_for_archive(parts, now, retention)
        if part is None:
            return None
    finally:
        await conn.close()
    return await archive_partition(
        url, part, directory, projector_lag=projector_lag, lock_timeout_s=lock_timeout_s
    )


async def archive_partition(
    url: str,
    part: Partition,
    directory: Path,
    *,
    projector_lag: ProjectorLag,
    lock_timeout_s: float = 5.0,
) -> ArchiveResult:
    """Archive ``part`` to ``directory`` and drop it (steps 1-5 of the module docstring)."""
    conn = await connect(url)
    try:
        if not await conn.fetchval(MAY_ARCHIVE):
            raise ArchiveRefusedError(
                "this role may not detach partitions of awooop_events: run the archive as the "
                "tables' owner (the role that ran `awooop migrate`) or a superuser"
            )
        await asyncio.to_thread(directory.mkdir, parents=True, exist_ok=True)
        result = await _write(conn, part, directory, projector_lag)
        async with conn.transaction():
            await conn.execute(SET_PLATFORM)
            if result.snapshots:
                columns = list(zip(*result.snapshots, strict=True))
                await conn.execute(UPSERT_SNAPSHOTS, *[list(c) for c in columns])
            await conn.execute("RESET ROLE")
            await conn.execute(
                UPSERT_CATALOGUE,
                part.name,
                part.range_from,
                part.range_to,
                result.events,
                result.first_position,
                result.last_position,
                file_name(part.name),
                result.sha256,
            )
        await conn.execute(STATEMENT_TIMEOUT.format(ms=int(lock_timeout_s * 1000 * 12)))
        await conn.execute(EVENTS.detach(part.name))
        await _drop_detached(conn, part, result.events)
        result.dropped = True
        log.info(
            "log_partition_archived",
            partition=part.name,
            events=result.events,
            streams=result.streams,
            file=str(result.file),
        )
        return result
    finally:
        await conn.close()


async def _write(
    conn: Connection, part: Partition, directory: Path, projector_lag: ProjectorLag
) -> ArchiveResult:
    result = ArchiveResult(part.name)
    final = directory / file_name(part.name)
    temporary = final.with_name(final.name + ".tmp")
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        await conn.execute(SET_PLATFORM)
        await _check_archivable(conn, part, projector_lag)
        header = Header(FORMAT, part.name, part.range_from, part.range_to)
        gz = await asyncio.to_thread(gzip.open, temporary, "wb", 6)
        try:
            await asyncio.to_thread(gz.write, encode(header) + b"\n")
            current: StreamFold | None = None
            cursor = await conn.cursor(READ_PARTITION, part.range_from, part.range_to)
            while rows := await cursor.fetch(FETCH_ROWS):
                lines: list[bytes] = []
                for r in rows:
                    lines.append(event_line(r))
                    if current is None or r["stream_id"] != current.stream_id:
                        if current is not None:
                            _close_stream(current, result)
                        snapshot = (
                            (r["snapshot_version"], r["snapshot_state"])
                            if r["snapshot_version"] is not None
                            else None
                        )
                        if snapshot is None and r["version"] > 1:
                            snapshot = await _snapshot_of(conn, r["stream_id"])
                        current = start_fold(r["stream_id"], r["project_id"], snapshot)
                    current.add(r["version"], r["position"], r["data"])
                    result.events += 1
                    result.first_position = min(
                        result.first_position or r["position"], r["position"]
                    )
                    result.last_position = max(result.last_position or 0, r["position"])
                await asyncio.to_thread(gz.write, b"".join(lines))
            if current is not None:
                _close_stream(current, result)
            await asyncio.to_thread(gz.write, encode(Trailer(True, result.events)) + b"\n")
        finally:
            await asyncio.to_thread(gz.close)
    await asyncio.to_thread(persist, temporary, final)
    result.file = final
    result.sha256 = await asyncio.to_thread(sha256_of, final)
    sidecar = final.with_name(final.name + ".sha256")
    await asyncio.to_thread(write_durably, sidecar, f"{result.sha256}  {final.name}\n".encode())
    return result


async def _snapshot_of(conn: Connection, stream_id: str) -> tuple[int, str | None] | None:
    rows = await conn.fetch(
        "SELECT version, state::text AS state FROM awooop_stream_snapshots WHERE stream_id = $1",
        stream_id,
    )
    return (rows[0]["version"], rows[0]["state"]) if rows else None


def _close_stream(fold: StreamFold, result: ArchiveResult) -> None:
    if fold.problem is not None:
        raise ArchiveRefusedError(f"partition {result.partition}: {fold.problem}")
    result.streams += 1
    state = encode_state(fold.state).decode() if fold.state is not None else None
    result.snapshots.append((fold.stream_id, fold.project_id, fold.version, fold.position, state))


async def _check_archivable(conn: Connection, part: Partition, projector_lag: ProjectorLag) -> None:
    live = await conn.fetchrow(LIVE_RUN, part.range_from, part.range_to)
    if live is not None:
        raise ArchiveRefusedError(
            f"partition {part.name}: run {live['run_id']} is {live['status']}; live runs keep "
            "their partition"
        )
    unpublished = await conn.fetchval(UNPUBLISHED, part.range_from, part.range_to)
    if unpublished is not None:
        raise ArchiveRefusedError(
            f"partition {part.name}: the relay has not published position {unpublished} yet"
        )
    for row in await conn.fetch(RUNNING_PROJECTORS):
        behind = await projector_lag(conn, row["name"], part.range_from, part.range_to)
        if behind is not None:
            raise ArchiveRefusedError(
                f"partition {part.name}: projector {row['name']} has not applied {behind} yet"
            )


async def _drop_detached(conn: Connection, part: Partition, archived: int) -> None:
    await conn.execute(EVENTS.no_force(part.name))
    count = await conn.fetchval(EVENTS.select(part.name, "count(*)"))
    if count != archived:
        # A row arrived after the file was written: put the partition back, archive it later.
        await conn.execute(EVENTS.attach(part.name, part.range_from, part.range_to))
        await conn.execute(EVENTS.force(part.name))  # forced again, as every partition is
        await conn.execute(DELETE_CATALOGUE, part.name)
        raise ArchiveRefusedError(
            f"partition {part.name}: {count} rows after detaching, {archived} archived; "
            "re-attached, will try again"
        )
    await conn.execute(EVENTS.drop(part.name))


async def _finish_detached(conn: Connection) -> None:
    """Complete what a crash interrupted: a detach left pending, a detached table not dropped."""
    for row in await conn.fetch(DETACH_PENDING, EVENTS.parent):
        await conn.execute(EVENTS.finalize(row["relname"]))
    catalogue = {r["partition_name"]: r for r in await conn.fetch(CATALOGUE)}
    for row in await conn.fetch(DETACHED):
        entry = catalogue[row["partition_name"]]
        part = Partition(entry["partition_name"], entry["range_from"], entry["range_to"])
        await _drop_detached(conn, part, entry["events"])


__all__ = ["ArchiveResult", "ProjectorLag", "archive_due", "archive_partition"]
