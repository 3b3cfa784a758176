"""Revision history per contract (``awooop_revision_history``).

Built from the streams ``revision-<project>/<family>/<contract>``: one row per
RevisionCreated (revision_id, body_hash) and per RevisionActivated (the new revision, the one
it replaced, the actor), with the event time, log position and trace id. The per-stream
version is the highest version stored for the stream.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, ClassVar

import msgspec

from awooop.core.db import Connection
from awooop.core.errors import ProjectionStreamError
from awooop.core.events import RevisionActivated, RevisionCreated
from awooop.projections.base import (
    LogEvent,
    PerStreamRows,
    TableNames,
    TableSpec,
    check_consecutive,
    lagging_rows_sql,
    runtime_event,
    trace_id_of,
)

PREFIX = "revision-"
TABLE = "awooop_revision_history"
COLUMNS = (
    "stream_id",
    "version",
    "project_id",
    "contract_family",
    "contract_id",
    "event_type",
    "revision_id",
    "previous_revision_id",
    "body_hash",
    "actor",
    "at",
    "position",
    "trace_id",
)

# --- SQL ------------------------------------------------------------------------------------


def _versions(table: str) -> str:
    return (
        f"SELECT stream_id, max(version) AS version FROM {table} "  # noqa: S608 - constant identifiers
        "WHERE stream_id = ANY($1::text[]) GROUP BY stream_id"
    )


SELECT_HISTORY = """
SELECT stream_id, version, project_id, contract_family, contract_id, event_type, revision_id,
       previous_revision_id, body_hash, actor, at, position, trace_id
FROM awooop_revision_history
WHERE project_id = $1 AND contract_family = $2 AND contract_id = $3 ORDER BY version
"""

# --- pure ------------------------------------------------------------------------------------


class RevisionEntry(msgspec.Struct, frozen=True, kw_only=True):
    stream_id: str
    version: int
    project_id: str
    contract_family: str
    contract_id: str
    event_type: str
    revision_id: uuid.UUID
    previous_revision_id: uuid.UUID | None
    body_hash: str | None
    actor: str | None
    at: datetime
    position: int
    trace_id: str | None


def entry(event: LogEvent) -> RevisionEntry:
    body = runtime_event(event)
    common: dict[str, Any] = {
        "stream_id": event.stream_id,
        "version": event.version,
        "project_id": event.project_id,
        "event_type": event.event_type,
        "at": body.at,
        "position": event.position,
        "trace_id": trace_id_of(event.traceparent),
    }
    match body:
        case RevisionCreated():
            return RevisionEntry(
                **common,
                contract_family=body.contract_family,
                contract_id=body.contract_id,
                revision_id=body.revision_id,
                previous_revision_id=None,
                body_hash=body.body_hash,
                actor=None,
            )
        case RevisionActivated():
            return RevisionEntry(
                **common,
                contract_family=body.contract_family,
                contract_id=body.contract_id,
                revision_id=body.new_revision_id,
                previous_revision_id=body.old_revision_id,
                body_hash=None,
                actor=body.actor,
            )
    raise ProjectionStreamError(
        f"stream {event.stream_id}: {event.event_type} is not a revision event",
        stream_id=event.stream_id,
    )


def entries(version: int, events: Sequence[LogEvent]) -> list[RevisionEntry]:
    check_consecutive(version, events)
    return [entry(e) for e in events]


class RevisionHistoryProjection(PerStreamRows):
    name: ClassVar[str] = "revision_history"
    description: ClassVar[str] = "awooop_revision_history: revisions created and activated"
    inline = False
    skips_undeclared = False
    event_types = frozenset({"RevisionCreated", "RevisionActivated"})
    stream_prefix = PREFIX
    tables: tuple[TableSpec, ...] = (
        TableSpec(name=TABLE, key=("stream_id", "version"), columns=COLUMNS, label="stream_id"),
    )

    table = TABLE
    columns = COLUMNS

    async def load_versions(
        self, conn: Connection, names: TableNames, stream_ids: Sequence[str]
    ) -> dict[str, int]:
        rows = await conn.fetch(_versions(names[TABLE]), list(stream_ids))
        return {r["stream_id"]: r["version"] for r in rows}

    heads = load_versions

    def rows(self, head: int | None, events: Sequence[LogEvent]) -> Sequence[msgspec.Struct]:
        return entries(head or 0, events)

    def lagging_sql(self, names: TableNames) -> str:
        return lagging_rows_sql(names[TABLE], "t.stream_id = s.stream_id")


async def revision_history(
    conn: Connection, project_id: str, contract_family: str, contract_id: str
) -> list[RevisionEntry]:
    """A contract's revision history, oldest first."""
    rows = await conn.fetch(SELECT_HISTORY, project_id, contract_family, contract_id)
    return [msgspec.convert(dict(r.items()), RevisionEntry, strict=False) for r in rows]
