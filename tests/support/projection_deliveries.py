"""Stream deliveries built from the Postgres log, as the relay would publish them."""

from __future__ import annotations

from dataclasses import dataclass

from awooop.core.db import Database
from awooop.eventlog.eventlog import RecordedEvent
from awooop.streams.envelope import Envelope


@dataclass(frozen=True)
class LogDelivery:
    """A delivery carrying an envelope (the runner needs nothing else of a delivery)."""

    envelope: Envelope
    stream: str = "events"
    entry_id: str = "0-0"
    delivery_count: int = 1


# The whole log in follower order. Not eventlog.read_forward: that one waits for every older
# transaction of the server, and other test sessions share it; here the writers are done.
ALL_EVENTS = """
SELECT position, tx_id::text::bigint AS tx_id, event_id, stream_id, version, project_id,
       event_type, data::text AS data, metadata, recorded_at
FROM awooop_events ORDER BY tx_id, position
"""


async def log_envelopes(db: Database) -> list[Envelope]:
    """Every event of the log, in follower order, as the relay would publish it."""
    envelopes: list[Envelope] = []
    async with db.platform_writes() as conn:
        for row in await conn.fetch(ALL_EVENTS):
            e = RecordedEvent(**dict(row.items()))
            tp = e.metadata.get("traceparent")
            envelopes.append(
                Envelope(
                    event_id=e.event_id,
                    position=e.position,
                    tx_id=e.tx_id,
                    stream_id=e.stream_id,
                    version=e.version,
                    project_id=e.project_id,
                    event_type=e.event_type,
                    payload=e.data.encode(),
                    traceparent=tp if isinstance(tp, str) else None,
                    recorded_at=e.recorded_at.timestamp(),
                )
            )
    return envelopes
