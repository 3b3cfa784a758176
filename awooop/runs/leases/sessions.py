"""Worker sessions (R-12, migration 0161): a worker holds its leases through one row.

- :func:`start`: before the worker's first claim, and again when its session ran out. When the
  worker id had a session before (an earlier process that used the id, or this process's
  session that ran out while it could not renew), the runs that session still holds are given
  up first, as the reaper gives up runs whose lease expired: the new session must never keep
  alive an attempt that nobody runs.
- :func:`renew`: the heartbeat's one statement per interval, whatever the number of leases.
  Only a session that has not run out, and only this process's.
- :func:`end`: at stop, a run the worker did not give back runs out at once.

A run's lease is live while its own ``lease_until`` and its worker's session are
(``sql/_lease_live.sql``); the rule is the database's, these functions only keep the row.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from awooop.core.db import Connection
from awooop.eventlog import queries, run_reads
from awooop.runs.leases.single import reap_rows

START = queries.load("session_start")
RENEW = queries.load("session_renew")
END = queries.load("session_end")
# Runs of an earlier session given up per transaction.
GIVE_UP_BATCH = 500


class Session(msgspec.Struct, frozen=True):
    worker_id: str
    started_at: datetime  # the database's clock: tells this session from a later one


async def start(
    conn: Connection, worker_id: str, ttl_s: float, after: Session | None = None
) -> tuple[Session, bool] | None:
    """Begin ``worker_id``'s session (one statement), ``after`` the process's last one if it
    had one; True when the id had one before, whose runs the caller then gives up
    (:func:`give_up_earlier`) before claiming. None: a later process holds the id with a live
    session, which this process must not take back."""
    row = await conn.fetchrow(
        START, worker_id, ttl_s, after.started_at if after is not None else None
    )
    if row is None:
        return None
    return Session(worker_id, row["started_at"]), bool(row["again"])


async def give_up_earlier(
    conn: Connection, session: Session, metadata: dict[str, Any] | None = None
) -> int:
    """Requeue or fail up to :data:`GIVE_UP_BATCH` runs that an earlier session of the worker
    id still holds; returns how many (fewer than the batch: none is left)."""
    rows = await conn.fetch(
        run_reads.LOCK_EARLIER_SESSION, session.worker_id, session.started_at, GIVE_UP_BATCH
    )
    return len(await reap_rows(conn, rows, metadata))


async def renew(conn: Connection, session: Session, ttl_s: float) -> datetime | None:
    """Renew ``session`` by ``ttl_s``; its new ``lease_until``, or None: the session is lost
    (it ran out, or a later process took the worker id)."""
    lease: datetime | None = await conn.fetchval(
        RENEW, session.worker_id, ttl_s, session.started_at
    )
    return lease


async def end(conn: Connection, session: Session) -> None:
    await conn.execute(END, session.worker_id, session.started_at)
