"""Whether a projector has applied the log's events of a time range: the check the log's
archive is handed (:data:`awooop.eventlog.archive.ProjectorLag`) before it drops a partition."""

from __future__ import annotations

from datetime import datetime

from awooop.core.db import Connection
from awooop.projections import registry
from awooop.projections.base import TableNames, stream_range

# A service's projection this process does not know (registered only where its projector
# runs): the streams it has a checkpoint for, behind the range's events.
CHECKPOINTS_BEHIND = """
SELECT e.stream_id FROM awooop_projection_checkpoints c
JOIN awooop_events e ON e.stream_id = c.stream_id AND e.version > c.version
WHERE c.projection = $1 AND e.recorded_at >= $2 AND e.recorded_at < $3
LIMIT 1
"""


async def projector_lag(
    conn: Connection, name: str, range_from: datetime, range_to: datetime
) -> str | None:
    """A stream whose events recorded in [range_from, range_to) projection ``name`` has not
    applied yet (``"stream <id>"``); None when it has applied them all. For a projection this
    process does not know, only the streams it has checkpoints for are checked."""
    projection = registry.find(name)
    if projection is None:
        stream = await conn.fetchval(CHECKPOINTS_BEHIND, name, range_from, range_to)
        return None if stream is None else f"stream {stream}"
    low, high = stream_range(projection.stream_prefix)
    lagging = projection.lagging_sql(TableNames())
    query = (
        f"SELECT l.stream_id FROM ({lagging}) l "  # noqa: S608 - the projection's own SQL
        "JOIN awooop_events e ON e.stream_id = l.stream_id AND e.version > l.view_version "
        "WHERE e.recorded_at >= $4 AND e.recorded_at < $5 LIMIT 1"
    )
    stream = await conn.fetchval(query, low, high, None, range_from, range_to)
    return None if stream is None else f"stream {stream}"
