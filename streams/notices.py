"""Delivering contract notices (R-21, R-22, R-25): ``awooop_contract_outbox`` -> notices stream.

The activation writes the outbox row in its own transaction (R-21); the relay publishes rows
with ``delivered_at IS NULL``, oldest first, then sets ``delivered_at``. ``relay_attempts`` is
incremented on every attempt (a row delivered at the first try shows 1). A crash between the
XADD and the mark sends the notice again (a duplicate); a refused XADD leaves the row for the
next attempt. Only the active relay runs this (it holds the relay lease), and no transaction is
held open across the XADD: a row lock would hold an xid, which holds back every follower of the
event log while Redis answers (or hangs).

The notices stream is read with plain XREAD by every worker (no groups) and capped with
``MAXLEN ~ AWOOOP_STREAM_MAXLEN``. Its epoch key is written afresh when missing (atomically
before appending): a reader that sees the epoch value change knows notices may have been lost
and revalidates its whole revision cache against the DB pointers.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from awooop.core import metrics
from awooop.core.config import Settings
from awooop.core.db import Connection
from awooop.core.logs import get_logger
from awooop.streams import scripts
from awooop.streams.consumer import REDIS_ERRORS
from awooop.streams.envelope import FIELD, Notice, encode
from awooop.streams.keys import Keys
from awooop.streams.rebuild import new_epoch

log = get_logger(__name__)

OUTBOX = "contract"  # the ``outbox`` label of the relay and lag metrics

# --- SQL -----------------------------------------------------------------------------------

SELECT_NOTICES = """
SELECT event_id, event_type, project_id, contract_family, contract_id, old_revision_id,
       new_revision_id, traceparent, created_at
FROM awooop_contract_outbox
WHERE delivered_at IS NULL
ORDER BY created_at
LIMIT $1
"""
MARK_NOTICES_DELIVERED = """
UPDATE awooop_contract_outbox
SET delivered_at = now(), relay_attempts = relay_attempts + 1
WHERE event_id = ANY($1::uuid[]) AND delivered_at IS NULL
"""
COUNT_NOTICE_FAILURE = """
UPDATE awooop_contract_outbox SET relay_attempts = relay_attempts + 1
WHERE event_id = ANY($1::uuid[])
"""
# --- delivery ------------------------------------------------------------------------------


def notice_of(row: Any) -> Notice:
    return Notice(
        event_id=row["event_id"],
        event_type=row["event_type"],
        project_id=row["project_id"],
        contract_family=row["contract_family"],
        contract_id=row["contract_id"],
        old_revision_id=row["old_revision_id"],
        new_revision_id=row["new_revision_id"],
        traceparent=row["traceparent"],
        created_at=row["created_at"].timestamp(),
    )


async def deliver_notices(
    conn: Connection,
    redis: Any,
    keys: Keys,
    settings: Settings,
    fault_hook: Callable[[str], Awaitable[None]] | None = None,
) -> int:
    """Publish every undelivered notice; return how many. Raises the Redis error (after
    counting the attempt on the rows) when Redis refuses."""
    size = settings.relay_batch_size
    delivered = 0
    while True:
        rows = await conn.fetch(SELECT_NOTICES, size)
        if not rows:
            metrics.OUTBOX_LAG.labels(OUTBOX).set(0.0)
            return delivered
        ids = [row["event_id"] for row in rows]
        entries = [encode(notice_of(row)) for row in rows]
        try:
            reset = await scripts.PUBLISH_NOTICES(
                redis,
                [keys.notices_epoch(), keys.notices_stream()],
                [new_epoch(), str(settings.stream_maxlen), FIELD, *entries],
            )
        except REDIS_ERRORS:
            metrics.RELAY_ATTEMPTS.labels(OUTBOX, "error").inc()
            metrics.OUTBOX_LAG.labels(OUTBOX).set(
                max(0.0, time.time() - rows[0]["created_at"].timestamp())
            )
            await conn.execute(COUNT_NOTICE_FAILURE, ids)
            raise
        if int(reset):
            log.warning("notices_epoch_written", key=keys.notices_epoch())
        if fault_hook is not None:
            await fault_hook("notices_published")
        await conn.execute(MARK_NOTICES_DELIVERED, ids)
        metrics.RELAY_ATTEMPTS.labels(OUTBOX, "ok").inc()
        metrics.RELAY_PUBLISHED.labels(OUTBOX).inc(len(rows))
        delivered += len(rows)
        if len(rows) < size:
            metrics.OUTBOX_LAG.labels(OUTBOX).set(0.0)
            return delivered
