"""The approval agent's reviewer (``agents.py --agent approval``): the benchmark approves every
run that waits, through the path ``awooop runs approve RUN --by NAME`` takes.

As a reviewer's tool would, it reads the project's runs WAITING_APPROVAL in one list
(:func:`awooop.runs.reads.list_runs`, what ``awooop runs list --status WAITING_APPROVAL``
reads), then approves each of them in its own tenant transaction
(:func:`awooop.runs.approvals.decide_as`, what the CLI's ``--by`` and the management route's
``{"by": ...}`` call), ``PARALLEL`` at once, and lists again; with none waiting it looks again
after ``POLL_S``. One decision per run: a refusal (a run decided already, E-APPROVAL-003) is
counted, never retried. Its connections carry the application name ``agents-reviewer``, so that
their Postgres backends are told apart (``REVIEWER_BACKENDS``).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import Counter

from agents_stack import PROJECT

from awooop.core.db import Connection, Database
from awooop.core.errors import AwoooPError
from awooop.eventlog.state import RunStatus
from awooop.runs import approvals, reads

APPLICATION = "agents-reviewer"
PARALLEL = 8  # decisions at once (the reviewer's pool)
POLL_S = 0.1  # the pause when no run waits
ACTOR = "bench-reviewer"
BY = "bench"
# The pids of the reviewer's Postgres backends (on the benchmark's own connection).
REVIEWER_BACKENDS = """
SELECT pid FROM pg_stat_activity
WHERE datname = current_database() AND application_name = $1
"""


class Reviewer:
    """Approves the project's waiting runs while running (:meth:`start` to :meth:`stop`)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.db: Database | None = None
        self.task: asyncio.Task[None] | None = None
        self.decisions: Counter[uuid.UUID] = Counter()  # per run
        self.refusals: Counter[str] = Counter()  # per error code
        self.lists = 0

    async def open(self) -> None:
        joiner = "&" if "?" in self.url else "?"
        url = f"{self.url}{joiner}application_name={APPLICATION}"
        self.db = await Database.open(url, max_size=PARALLEL)

    async def close(self) -> None:
        await self.stop()
        if self.db is not None:
            await self.db.close()

    def start(self) -> None:
        """Review from now on; :meth:`figures` counts from here (the burst's, not the
        warm-up's)."""
        self.decisions.clear()
        self.refusals.clear()
        self.lists = 0
        self.task = asyncio.create_task(self._review())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
            self.task = None

    def figures(self) -> dict[str, object]:
        return {
            "lists": self.lists,
            "decisions": sum(self.decisions.values()),
            "runs_decided_more_than_once": sum(1 for n in self.decisions.values() if n > 1),
            "refusals": dict(self.refusals),
        }

    async def _review(self) -> None:
        assert self.db is not None
        db = self.db
        gate = asyncio.Semaphore(PARALLEL)

        async def waiting(conn: Connection) -> list[reads.RunSummary]:
            return await reads.list_runs(
                conn, project_id=PROJECT, status=RunStatus.WAITING_APPROVAL, limit=reads.MAX_LIMIT
            )

        async def approve(run_id: uuid.UUID) -> None:
            async with gate:
                self.decisions[run_id] += 1
                try:
                    await db.in_tenant(
                        PROJECT,
                        lambda conn: approvals.decide_as(
                            conn,
                            run_id,
                            approvals.Decision.APPROVED,
                            actor=ACTOR,
                            by=BY,
                            metadata={"actor": ACTOR},
                        ),
                    )
                except AwoooPError as exc:
                    self.refusals[exc.code] += 1

        while True:
            runs = await db.in_tenant(PROJECT, waiting)
            self.lists += 1
            if not runs:
                await asyncio.sleep(POLL_S)
                continue
            await asyncio.gather(*(approve(r.run_id) for r in runs))
