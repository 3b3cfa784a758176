"""The ingest write (R-01, R-03, R-04): dedupe rows, runs, their streams and first events in
ONE statement (``ingest_new.sql``); :mod:`awooop.ingest.ingest_write` runs the rounds around it.

The run rows are built here by ``apply(None, RunCreated)`` and the events by ``encode_event``,
as every other writer builds them; the statement only picks the keys that were new and stamps
the database clock over :data:`CLOCK_PLACEHOLDER`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import msgspec

from awooop.core.events import RunCreated, encode_event, run_stream_id
from awooop.core.querier import Querier
from awooop.eventlog import queries
from awooop.eventlog.state import apply

INSERT_NEW = queries.load("ingest_new")
LOOKUP_DEDUPE = queries.load("dedupe_lookup")
# Stands in for the clock while Python builds rows; the statement replaces it with now().
CLOCK_PLACEHOLDER = datetime(1970, 1, 1, tzinfo=UTC)
CLOCK_COLUMNS = frozenset({"created_at", "updated_at"})  # what apply(None, RunCreated) stamps
_json_encode = msgspec.json.Encoder().encode


def arguments(
    project_id: str,
    channel_type: str,
    runs: Sequence[RunCreated],
    dedupe_ttl_s: float,
    metadata: Sequence[dict[str, Any]],
) -> list[Any]:
    """The parameters of INSERT_NEW; the run rows are built by ``apply``."""
    return [
        project_id,
        channel_type,
        [r.provider_event_id for r in runs],
        dedupe_ttl_s,  # $4, as in the dedupe probe both statements ask (_dedupe_probe.sql)
        [r.run_id for r in runs],
        [run_stream_id(r.run_id) for r in runs],
        [uuid.uuid4() for _ in runs],
        [encode_event(r).decode() for r in runs],
        [_json_encode(m).decode() for m in metadata],
        # $10: JSON text, encoded here, not by the connection's codec: a producer's own
        # connection has asyncpg's (text only) or codecs of its own (awooop.producer).
        _json_encode([apply(None, run) for run in runs]).decode(),
    ]


class Guard(msgspec.Struct, frozen=True):
    """What the statement read of its transaction before writing anything."""

    tenant: str | None  # awooop.project_id (None: not set)
    isolation: str
    bound: bool  # awooop_tenant_bound: the login's binding allows the project


async def insert_new(
    conn: Querier,
    project_id: str,
    channel_type: str,
    runs: Sequence[RunCreated],
    dedupe_ttl_s: float,
    metadata: Sequence[dict[str, Any]],
) -> tuple[Guard, list[Any]]:
    """Create the runs whose key is new, unless the guard refuses the transaction (then
    nothing is written and the rows mean nothing). The rows: one per new key (``created``)
    and per key seen in the snapshot (``expired``: past its TTL), each with
    ``provider_event_id`` and ``run_id``."""
    rows = await conn.fetch(
        INSERT_NEW, *arguments(project_id, channel_type, runs, dedupe_ttl_s, metadata)
    )
    [guard] = [r for r in rows if r["provider_event_id"] is None]
    return (
        Guard(guard["tenant"] or None, guard["isolation"], bool(guard["bound"])),
        [r for r in rows if r["provider_event_id"] is not None],
    )


async def look_up(
    conn: Querier, project_id: str, channel_type: str, keys: list[str], dedupe_ttl_s: float
) -> list[Any]:
    """The dedupe row that decides each of ``keys`` now (``dedupe_lookup.sql``), for keys a
    concurrent delivery committed after :func:`insert_new`'s snapshot: ``provider_event_id``,
    ``run_id`` and ``expired``."""
    return list(await conn.fetch(LOOKUP_DEDUPE, project_id, channel_type, keys, dedupe_ttl_s))
