"""The fleet's processes by release: ``awooop_processes`` (migration 0121).

A long-running process writes its row once it has passed the start check, refreshes it while it
runs and deletes it when it stops (awooop/core/schema_watch.py). ``awooop migrate`` reads the
live rows to hold back a contract step that would stop one of them (awooop/core/migrate.py).
A process is live while its row was refreshed within :data:`STALE_AFTER_INTERVALS` of its own
re-check interval (``recheck_s``, in the row); rows of processes that died without
deregistering are pruned after :data:`PRUNE_AFTER_S`. Releases before the registry do not
register.
"""

from __future__ import annotations

import os
import socket

from awooop.core.db import Connection
from awooop.core.migration_phases import LiveProcess

# A worker's routes as the registry stores them: contracts, projects (None: every one), and
# the version of its handler (None: unknown, or no handler).
Serves = tuple[list[str] | None, list[str] | None, str | None]
NO_ROUTES: Serves = (None, None, None)
STALE_AFTER_INTERVALS = 3  # written into migration 0121's awooop_live_workers() too
PRUNE_AFTER_S = 24 * 3600.0

# contracts, projects ($7, $8): what a worker process serves (migration 0137; NULL: every one);
# handler_version ($9): the version of the handler it runs (migration 0140).
REGISTER = """
INSERT INTO awooop_processes AS p
    (instance, kind, host, pid, release, recheck_s, contracts, projects, handler_version)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (instance) DO UPDATE
SET seen_at = now(), release = EXCLUDED.release, recheck_s = EXCLUDED.recheck_s,
    contracts = EXCLUDED.contracts, projects = EXCLUDED.projects,
    handler_version = EXCLUDED.handler_version
"""
PRUNE = "DELETE FROM awooop_processes WHERE seen_at < now() - make_interval(secs => $1)"
DEREGISTER = "DELETE FROM awooop_processes WHERE instance = $1"
# Only the live ones: a bounded read of a small table.
LIVE = """
SELECT instance, kind, host, pid, release FROM awooop_processes
WHERE seen_at >= now() - make_interval(secs => $1 * recheck_s)
ORDER BY release, kind, instance
"""
REGISTRY_EXISTS = "SELECT to_regclass('awooop_processes') IS NOT NULL"


async def live_processes(conn: Connection) -> list[LiveProcess]:
    """The processes seen within :data:`STALE_AFTER_INTERVALS` of their own re-check interval;
    none on a database without the registry."""
    if not await conn.fetchval(REGISTRY_EXISTS):
        return []
    rows = await conn.fetch(LIVE, STALE_AFTER_INTERVALS)
    return [LiveProcess(r["instance"], r["kind"], r["host"], r["pid"], r["release"]) for r in rows]


async def register(
    conn: Connection,
    instance: str,
    kind: str,
    release: str,
    recheck_s: float,
    serves: Serves = NO_ROUTES,
) -> None:
    """Write or refresh this process's row and prune dead ones. The registry exists: a process
    registers only after the start check found its release's migrations (0121, 0137 and 0140
    among them). ``serves``: the contracts and projects its worker serves (None: every one) and
    its handler's version."""
    await conn.execute(
        REGISTER, instance, kind, socket.gethostname(), os.getpid(), release, recheck_s, *serves
    )
    await conn.execute(PRUNE, PRUNE_AFTER_S)


async def deregister(conn: Connection, instance: str) -> None:
    await conn.execute(DEREGISTER, instance)
