"""A handler run by a real worker on a real database: :class:`PostgresKit`, what the
``awooop_postgres`` fixture gives (:mod:`awooop.testing.pytest_plugin`)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import msgspec

from awooop.core.config import Settings
from awooop.core.db import Connection, Database
from awooop.core.events import Event, RunCreated, run_stream_id
from awooop.eventlog import eventlog
from awooop.eventlog.runs import create_run
from awooop.eventlog.state import RunState
from awooop.loops import timers
from awooop.runs import approvals, output_log, run_rows, signals
from awooop.runs.approvals import ApprovalTicket, Decision
from awooop.testing.fakes import FakeModel
from awooop.testing.journal import Journal
from awooop.testing.kit import Handler
from awooop.testing.output import KitOutput
from awooop.worker.runtime import Worker

# --- SQL -------------------------------------------------------------------------------------
# The test database's open waits, due $1 sooner (PostgresKit.advance).
MOVE_WAITS = "UPDATE awooop_run_waits SET due_at = due_at - $1::interval WHERE due_at IS NOT NULL"
# ---------------------------------------------------------------------------------------------


@dataclass
class PostgresKit:
    """A handler run by a real worker on a real database (see the module doc)."""

    db: Database
    settings: Settings
    project_id: str = "test-project"
    model: FakeModel = field(default_factory=FakeModel)
    tickets: list[ApprovalTicket] = field(default_factory=list)  # the worker's notifier's

    async def _notify(self, ticket: ApprovalTicket) -> None:
        self.tickets.append(ticket)

    async def create(self, input: Any = None, *, max_attempts: int = 3) -> uuid.UUID:
        """A new PENDING run of ``input`` in :attr:`project_id`."""
        run_id = uuid.uuid4()

        async def write(conn: Connection) -> None:
            now = await conn.fetchval("SELECT now()")
            await create_run(
                conn,
                RunCreated(
                    at=now,
                    run_id=run_id,
                    project_id=self.project_id,
                    channel_type="api",
                    provider_event_id=str(run_id),
                    input={} if input is None else msgspec.to_builtins(input),
                    max_attempts=max_attempts,
                ),
            )

        await self.db.in_tenant(self.project_id, write)
        return run_id

    async def work(self, handler: Handler, *, max_s: float = 60.0) -> int:
        """Run everything runnable with one in-process worker (polling, no Redis) until idle,
        runs made runnable by others' ends included (a child's completion resumes its
        parent): the number of attempts run (:mod:`awooop.worker.burst`)."""
        worker = Worker(
            db=self.db,
            settings=self.settings,
            handler=handler,
            llm=self.model,
            notifier=self._notify,
            concurrency=2,
        )
        return await worker.run_until_idle(max_s=max_s)

    async def run(self, handler: Handler, input: Any = None) -> RunState:
        """Create a run of ``input``, work until idle, and return the run's state."""
        run_id = await self.create(input)
        await self.work(handler)
        return await self.state(run_id)

    async def approve(
        self,
        run_id: uuid.UUID,
        *,
        by: str = "test",
        actor: str = "kit",
        reason: str = "",
        payload: Any = None,
    ) -> RunState:
        """Approve the run's open request for the person ``by``, as ``awooop runs approve
        --by`` does (the decision's ``by``; ``actor`` stands for the management token); then
        :meth:`work` again."""
        return await self._decide(run_id, Decision.APPROVED, by, actor, reason, payload)

    async def reject(
        self,
        run_id: uuid.UUID,
        *,
        by: str = "test",
        actor: str = "kit",
        reason: str = "",
        payload: Any = None,
    ) -> RunState:
        return await self._decide(run_id, Decision.REJECTED, by, actor, reason, payload)

    async def _decide(
        self, run_id: uuid.UUID, verdict: Decision, by: str, actor: str, reason: str, payload: Any
    ) -> RunState:
        return await self.db.in_tenant(
            self.project_id,
            lambda c: approvals.decide_as(
                c, run_id, verdict, actor=actor, by=by, reason=reason, payload=payload
            ),
        )

    async def signal(
        self, run_id: uuid.UUID, name: str, payload: Any = None, *, key: str, sent_by: str = "test"
    ) -> signals.Sent:
        """Send the run a signal, as ``awooop runs signal`` does: delivered at once to a wait
        for it (RESUMED; then :meth:`work` again), else kept for a later wait."""
        return await self.db.in_tenant(
            self.project_id,
            lambda c: signals.send(
                c,
                run_id,
                name,
                payload,
                key=key,
                sent_by=sent_by,
                payload_max_bytes=self.settings.signal_payload_max_bytes,
                kept_max=self.settings.signals_per_run_max,
            ),
        )

    async def fire_timers(self) -> int:
        """One pass of the ``timers`` loop: the waits due now end (``TimerFired``: RESUMED),
        the producer's pending signals are delivered; then :meth:`work` again. Returns the
        number of waits ended."""
        batch = self.settings.timer_batch_size
        fired, _ = await timers.fire_once(self.db, batch)
        await timers.deliver_once(self.db, batch)
        return fired

    async def advance(self, by: timedelta) -> int:
        """As if ``by`` had passed for the open waits: their due times (a sleep's, an event
        wait's timeout) move ``by`` earlier in ``awooop_run_waits`` (the database's clock does
        not move; ``TimerFired.due_at`` shows the moved time, the journal the first one),
        then :meth:`fire_timers`."""
        async with self.db.platform_writes() as conn:
            await conn.execute(MOVE_WAITS, by)
        return await self.fire_timers()

    async def state(self, run_id: uuid.UUID) -> RunState:
        async with self.db.tenant(self.project_id) as conn:
            found = await run_rows.load(conn, run_id)
        assert found is not None, f"no run {run_id}"
        return found

    async def journal(self, run_id: uuid.UUID) -> Journal:
        """The run's events, as a :class:`~awooop.testing.Journal` (replayable in the kit)."""
        async with self.db.tenant(self.project_id) as conn:
            stored = await eventlog.read_stream(conn, run_stream_id(run_id))
        events: list[Event] = [e.decode() for e in stored]
        return Journal(events)

    async def output(self, run_id: uuid.UUID) -> KitOutput:
        """What the run emitted (``run.emit_output``), as the worker wrote it: one chunk per
        row, with its attempt (``truncated`` when the limit's marker was written)."""
        found = KitOutput(self.settings.output_max_bytes)
        after = 0
        while True:
            async with self.db.tenant(self.project_id) as conn:
                page = await output_log.page(conn, run_id, after, output_log.MAX_PAGE_ROWS)
            assert page is not None, f"no run {run_id}"
            for row in page.rows:
                if row.truncated:
                    found.truncated = True
                else:
                    found.chunks.append((row.attempt, row.text))
                after = row.seq
            if not page.more:
                return found
