"""The log archive read back: the events of every dropped partition, from their files, copied
into a table a replay from the beginning reads before the live log (``awooop replay
--from-archive DIR``).

Each file is checked before any of its events is used: its checksum against the sidecar and
the catalogue (``awooop_log_archives``), its header and trailer, its event count against the
catalogue's. A missing file of a dropped partition is an error naming every missing file.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

from awooop.core.db import Connection
from awooop.core.errors import ArchiveFileError
from awooop.core.pools import PLATFORM_ROLE
from awooop.eventlog.archive import CATALOGUE
from awooop.eventlog.archive_files import EVENT_COLUMNS, ArchivedEvent, read_archive
from awooop.eventlog.partitions import partitions

# The restore table: the archive's columns, tx_id as a plain number. Its name is chosen by the
# caller (the replay's awooop_restored_<projection>, a registered projection's name, never user
# input).


def create_restored_sql(table: str) -> str:
    return (
        f"CREATE UNLOGGED TABLE {table} (position bigint, tx_id bigint, event_id uuid, "
        "stream_id text, version integer, project_id text, event_type text, data jsonb, "
        "metadata jsonb, recorded_at timestamptz)"
    )


def index_restored_sql(table: str) -> str:
    return f"CREATE INDEX ON {table} (stream_id, version); ANALYZE {table}"


def drop_restored_sql(table: str) -> str:
    return f"DROP TABLE IF EXISTS {table}"


class CatalogueEntry(msgspec.Struct, frozen=True):
    partition_name: str
    range_from: datetime
    range_to: datetime
    events: int
    file_name: str
    sha256: str


async def dropped_partitions(conn: Connection) -> list[CatalogueEntry]:
    """Archived partitions that are no longer in the log (their events exist only in files)."""
    attached = {p.name for p in await partitions(conn)}
    return [
        CatalogueEntry(**dict(r))
        for r in await conn.fetch(CATALOGUE)
        if r["partition_name"] not in attached
    ]


def check_files(directory: Path, entries: Sequence[CatalogueEntry]) -> list[Path]:
    """The archive files of ``entries`` in ``directory``; ArchiveFileError names every file
    that is missing."""
    missing = [e.file_name for e in entries if not (directory / e.file_name).is_file()]
    if missing:
        raise ArchiveFileError(
            f"{directory}: missing archive files of dropped partitions: {', '.join(missing)}"
        )
    return [directory / e.file_name for e in entries]


async def archived_events(
    directory: Path, entries: Sequence[CatalogueEntry]
) -> AsyncIterator[list[ArchivedEvent]]:
    """Each dropped partition's events, file by file, each checked (checksums, trailer)."""
    for entry, path in zip(entries, check_files(directory, entries), strict=True):
        events = await asyncio.to_thread(read_archive, path, entry.sha256)
        if len(events) != entry.events:
            raise ArchiveFileError(
                f"{path}: {len(events)} events, the catalogue says {entry.events}"
            )
        yield list(events)


def restored_record(e: ArchivedEvent) -> tuple[Any, ...]:
    """An archived event as a row of the restore table (EVENT_COLUMNS order)."""
    return (
        e.position,
        e.tx_id,
        e.event_id,
        e.stream_id,
        e.version,
        e.project_id,
        e.event_type,
        bytes(e.data),
        bytes(e.metadata),
        e.recorded_at,
    )


async def raw_json_copy(conn: Connection) -> None:
    """jsonb parameters as JSON bytes, unparsed: the restore copies the archive's text as is."""
    await conn.set_type_codec(
        "jsonb",
        schema="pg_catalog",
        encoder=lambda value: b"\x01" + value,
        decoder=lambda data: data[1:],
        format="binary",
    )


async def restore(conn: Connection, directory: Path, table: str) -> tuple[int, int]:
    """(Re)create ``table`` holding the events of every dropped partition, read from its file
    in ``directory`` (checked first), indexed and readable by the platform role; returns
    (partitions, events) restored. Sets ``conn``'s jsonb codec to raw bytes."""
    await conn.execute(drop_restored_sql(table))
    await conn.execute(create_restored_sql(table))
    await raw_json_copy(conn)
    entries = await dropped_partitions(conn)
    restored = 0
    async for events in archived_events(directory, entries):
        await conn.copy_records_to_table(
            table, records=[restored_record(e) for e in events], columns=EVENT_COLUMNS
        )
        restored += len(events)
    await conn.execute(index_restored_sql(table))
    await conn.execute(f"GRANT SELECT ON {table} TO {PLATFORM_ROLE}")
    return len(entries), restored
