"""Helpers for the revision tests: notices written the way the relay writes them.

The outbox relay (streams area) XADDs each ``awooop_contract_outbox`` row to
``keys.notices_stream()`` as a msgpack ``awooop.streams.envelope.Notice`` under field ``FIELD`` and
marks the row delivered. ``xadd_notice`` writes one such entry directly, for tests of the
reader on its own; ``drop_outbox`` marks rows delivered WITHOUT publishing (a notice lost
between the relay and Redis).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from awooop.core.db import Database
from awooop.streams.envelope import FIELD, Notice, encode
from awooop.streams.keys import Keys

UNDELIVERED = """
SELECT event_id, event_type, project_id, contract_family, contract_id, old_revision_id,
       new_revision_id, traceparent, extract(epoch FROM created_at)::float8 AS created_at
FROM awooop_contract_outbox WHERE delivered_at IS NULL ORDER BY created_at, event_id
"""
MARK_ALL_DELIVERED = (
    "UPDATE awooop_contract_outbox SET delivered_at = now(), relay_attempts = relay_attempts + 1 "
    "WHERE delivered_at IS NULL"
)


def notice(
    project_id: str,
    family: str,
    contract_id: str,
    new_revision_id: uuid.UUID,
    old_revision_id: uuid.UUID | None = None,
) -> Notice:
    return Notice(
        event_id=uuid.uuid4(),
        event_type="revision_activated",
        project_id=project_id,
        contract_family=family,
        contract_id=contract_id,
        old_revision_id=old_revision_id,
        new_revision_id=new_revision_id,
        created_at=time.time(),
    )


async def set_epoch(redis: Any, keys: Keys, value: str | None = None) -> str:
    epoch = value or uuid.uuid4().hex
    await redis.set(keys.notices_epoch(), epoch)
    return epoch


async def xadd_notice(redis: Any, keys: Keys, item: Notice) -> str:
    entry_id = await redis.xadd(keys.notices_stream(), {FIELD: encode(item)})
    return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)


async def undelivered(db: Database) -> list[Notice]:
    async with db.platform_writes() as conn:
        rows = await conn.fetch(UNDELIVERED)
    return [Notice(**dict(r.items())) for r in rows]


async def drop_outbox(db: Database) -> int:
    """Mark every undelivered outbox row delivered without publishing it (a lost notice)."""
    async with db.platform_writes() as conn:
        status = await conn.execute(MARK_ALL_DELIVERED)
    return int(status.split()[-1])


async def publish_outbox(db: Database, redis: Any, keys: Keys) -> int:
    """Publish the undelivered rows once, synchronously (same stream, field and Notice format
    as the relay), for gateway tests that want to control when a notice appears. The end-to-end
    tests (test_revisions_relay.py, the split-brain test with notices) run the real relay."""
    items = await undelivered(db)
    for item in items:
        await xadd_notice(redis, keys, item)
    async with db.platform_writes() as conn:
        await conn.execute(
            "UPDATE awooop_contract_outbox SET delivered_at = now() WHERE event_id = ANY($1)",
            [item.event_id for item in items],
        )
    return len(items)
