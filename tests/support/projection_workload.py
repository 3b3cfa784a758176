"""A randomised run workload through the real write path, for projection and replay tests.

Runs are created, claimed, stepped, completed, failed, sent to approval, approved, cancelled,
requeued and retried by random legal walks (``awooop.runs.run_rows``), several at once so that
their events interleave in the log; heartbeats renew the lease clock with the one-statement
UPDATE the workers use (no event).

What each walker does is decided by a random generator of its own, seeded from ``seed`` and
the walker's index (walker 0's is ``Random(seed)``): how the walkers interleave (which depends
on timing) changes the order of their events in the log, never which projects their runs
belong to, which events each run gets or where each walk ends. ``walks[i]`` lists walker
``i``'s runs in the order it created them; ``run_ids`` lists every run in creation order
(which does depend on the interleaving).
"""

from __future__ import annotations

import asyncio
import random
import uuid
from dataclasses import dataclass, field
from typing import Any

from awooop.core.db import Connection, Database
from awooop.core.events import RevisionActivated, RevisionCreated, revision_stream_id
from awooop.eventlog import eventlog
from awooop.eventlog.runs import create_run, renew_leases
from awooop.eventlog.state import TRANSITIONS
from awooop.runs import run_rows
from tests.support.factories import WORKER, created, event_for

# The leases of "worker-a" (factories.WORKER, the claims' worker) and the attempt each is for;
# the workload renews them with the workers' own statement (renew_leases).
LEASED = """
SELECT run_id, attempt_count FROM awooop_run_state
WHERE worker_id = $1 AND status IN ('RUNNING', 'WAITING_TOOL')
"""


@dataclass
class Workload:
    db: Database
    projects: tuple[str, ...] = ("alpha", "beta", "gamma")
    seed: int = 7
    run_ids: list[tuple[str, uuid.UUID]] = field(default_factory=list)
    walks: list[list[tuple[str, uuid.UUID]]] = field(default_factory=list)
    events: int = 0
    heartbeats: int = 0

    def rng(self, walker: int) -> random.Random:
        """Walker ``walker``'s own generator: the same choices however the walkers interleave."""
        return random.Random(self.seed if walker == 0 else f"{self.seed}/{walker}")

    async def create(self, project: str) -> uuid.UUID:
        run_id = uuid.uuid4()

        async def tx(conn: Connection) -> None:
            now = await conn.fetchval("SELECT now()")
            await create_run(
                conn, created(run_id=run_id, project_id=project, at=now), metadata=_trace()
            )

        await self.db.in_tenant(project, tx)
        self.run_ids.append((project, run_id))
        self.events += 1
        return run_id

    async def step(self, project: str, run_id: uuid.UUID, rng: random.Random) -> bool:
        """One random legal event for the run (chosen with ``rng``); False when it is finished."""
        async with self.db.tenant(project) as conn:
            state, _ = await run_rows.lock(conn, run_id)
            options = sorted(TRANSITIONS[state.status])
        if not options:
            return False
        name = rng.choice(options)

        async def tx(conn: Connection) -> None:
            await run_rows.record(
                conn, run_id, lambda s, now: event_for(name, s, at=now), metadata=_trace()
            )

        await self.db.in_tenant(project, tx)
        self.events += 1
        return True

    async def heartbeat(self) -> None:
        # Every walker renews all of the worker's leases as the worker would. A claim can
        # commit between the read and the renewal; the renewal's fence (worker, attempt, a live
        # lease) and its never-backwards clock are what a replay must agree with, so a
        # hand-written UPDATE here would test nothing the workers do.
        async def tx(conn: Connection) -> int:
            held = {r["run_id"]: r["attempt_count"] for r in await conn.fetch(LEASED, WORKER)}
            return len(await renew_leases(conn, WORKER, held, 60.0))

        self.heartbeats += await self.db.in_platform_writes(tx)

    async def walker(self, index: int, runs: int, max_steps: int) -> None:
        rng = self.rng(index)
        walk = self.walks[index]
        for _ in range(runs):
            project = rng.choice(self.projects)
            run_id = await self.create(project)
            walk.append((project, run_id))
            for _ in range(rng.randint(0, max_steps)):
                if not await self.step(project, run_id, rng):
                    break
                if rng.random() < 0.3:
                    await self.heartbeat()
                await asyncio.sleep(0)

    async def run(self, walkers: int = 4, runs_each: int = 10, max_steps: int = 10) -> None:
        """``walkers`` walkers at once (numbered after those of earlier calls)."""
        first = len(self.walks)
        self.walks.extend([] for _ in range(walkers))
        await asyncio.gather(
            *(self.walker(first + i, runs_each, max_steps) for i in range(walkers))
        )

    async def revisions(self, project: str, contract: str, count: int) -> str:
        """``count`` revisions of one contract, each created then activated."""
        stream = revision_stream_id(project, "agent", contract)
        old: uuid.UUID | None = None
        for _ in range(count):

            async def tx(conn: Connection, previous: uuid.UUID | None = old) -> uuid.UUID:
                now = await conn.fetchval("SELECT now()")
                version = await conn.fetchval(
                    "SELECT coalesce(max(version), 0) FROM awooop_event_streams "
                    "WHERE stream_id = $1",
                    stream,
                )
                rid = uuid.uuid4()
                events: list[Any] = [
                    RevisionCreated(
                        at=now,
                        revision_id=rid,
                        contract_family="agent",
                        contract_id=contract,
                        body_hash=rid.hex,
                    ),
                    RevisionActivated(
                        at=now,
                        contract_family="agent",
                        contract_id=contract,
                        old_revision_id=previous,
                        new_revision_id=rid,
                        actor="ops",
                    ),
                ]
                await eventlog.append(conn, stream, project, version, events, _trace())
                return rid

            old = await self.db.in_tenant(project, tx)
            self.events += 2
        return stream


def _trace() -> dict[str, str]:
    return {"traceparent": f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01"}
