"""The log archive's files: one per partition, written once and read back for a replay.

**File format** (``awooop-log-archive/1``), one file per partition, ``<partition>.jsonl.gz``:
gzip of JSON lines. The first line is the header ``{"format", "partition", "range_from",
"range_to"}``; then one line per event, ordered by (stream_id, version), with the columns of
``awooop_events`` (``position``, ``tx_id``, ``event_id``, ``stream_id``, ``version``,
``project_id``, ``event_type``, ``data``, ``metadata``, ``recorded_at``); the last line is
``{"end": true, "events": N}``. Beside it, ``<partition>.jsonl.gz.sha256`` holds the file's
SHA-256 in ``sha256sum`` format (``sha256sum -c`` checks it), and ``awooop_log_archives``
keeps the same checksum, so a changed, truncated or missing file is found from either side.

Writing a partition's file is :mod:`awooop.eventlog.archive`; reading the files back for a replay
is :mod:`awooop.eventlog.archive_restore`.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

from awooop.core.errors import ArchiveFileError
from awooop.eventlog.eventlog import RecordedEvent

FORMAT = "awooop-log-archive/1"
# The archive's columns: every column of awooop_events, as a follower reads them.
EVENT_COLUMNS: tuple[str, ...] = RecordedEvent.__struct_fields__

encode = msgspec.json.Encoder().encode


class Header(msgspec.Struct, frozen=True):
    format: str
    partition: str
    range_from: datetime
    range_to: datetime


class Trailer(msgspec.Struct, frozen=True):
    end: bool
    events: int


class ArchivedEvent(msgspec.Struct, frozen=True):
    position: int
    tx_id: int
    event_id: uuid.UUID
    stream_id: str
    version: int
    project_id: str
    event_type: str
    data: msgspec.Raw
    metadata: msgspec.Raw
    recorded_at: datetime


def file_name(partition: str) -> str:
    return f"{partition}.jsonl.gz"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def event_line(r: Any) -> bytes:
    """One event row as its archive line (data and metadata are the database's JSON text)."""
    return (
        b'{"position":%d,"tx_id":%d,"event_id":"%s","stream_id":%s,"version":%d,'
        b'"project_id":%s,"event_type":%s,"data":%s,"metadata":%s,"recorded_at":%s}\n'
        % (
            r["position"],
            r["tx_id"],
            str(r["event_id"]).encode(),
            encode(r["stream_id"]),
            r["version"],
            encode(r["project_id"]),
            encode(r["event_type"]),
            r["data"].encode(),
            r["metadata"].encode(),
            encode(r["recorded_at"]),
        )
    )


def read_archive(path: Path, expected_sha256: str | None = None) -> list[ArchivedEvent]:
    """The events of an archive file, after checking its checksum (the sidecar's and, when
    given, the catalogue's), its header and its trailer. Raises ArchiveFileError."""
    sidecar = path.with_name(path.name + ".sha256")
    if not path.is_file():
        raise ArchiveFileError(f"{path}: no such archive file")
    actual = sha256_of(path)
    if sidecar.is_file():
        recorded = sidecar.read_text().split()[0] if sidecar.read_text().split() else ""
        if recorded != actual:
            raise ArchiveFileError(f"{path}: sha256 {actual} does not match {sidecar.name}")
    if expected_sha256 is not None and expected_sha256 != actual:
        raise ArchiveFileError(f"{path}: sha256 {actual} does not match the catalogue")
    decode_event_line = msgspec.json.Decoder(ArchivedEvent).decode
    events: list[ArchivedEvent] = []
    try:
        with gzip.open(path, "rb") as f:
            header = msgspec.json.decode(f.readline(), type=Header)
            if header.format != FORMAT:
                raise ArchiveFileError(f"{path}: format {header.format!r}, expected {FORMAT}")
            trailer: Trailer | None = None
            for line in f:
                if line.startswith(b'{"end"'):
                    trailer = msgspec.json.decode(line, type=Trailer)
                    break
                events.append(decode_event_line(line))
    except (OSError, EOFError, msgspec.DecodeError) as exc:
        raise ArchiveFileError(f"{path}: not a readable archive: {exc}") from exc
    if trailer is None or trailer.events != len(events):
        raise ArchiveFileError(f"{path}: truncated (no trailer, or its count differs)")
    return events


# --- durable writes ----------------------------------------------------------------------------


def persist(temporary: Path, final: Path) -> None:
    """Move a written ``temporary`` file into place once it and the rename are on disk."""
    with temporary.open("rb") as f:
        os.fsync(f.fileno())
    temporary.replace(final)
    _fsync_dir(final.parent)


def write_durably(path: Path, content: bytes) -> None:
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("wb") as f:
        f.write(content)
        f.flush()
        os.fsync(f.fileno())
    temporary.replace(path)
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
