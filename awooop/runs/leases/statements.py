"""The worker's statements on every run's path, on the run pool: the one door to that pool.

The run pool (:meth:`awooop.core.db.Database.in_run_statement`) keeps cached generic plans
and, in a worker, a per-statement bound; a claim, a completion, a sleep's start, journal events
(a model call, a step's result) or a heartbeat sent there is one statement that commits on its
own (no BEGIN/COMMIT: one round trip), and the other fenced writes are one transaction. Which
of the two a statement needs is decided here, once, so a call site names the statement and
cannot pick the mode wrongly.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from awooop.core.db import Database
from awooop.core.errors import LeaseLostError, UnstorableValueError
from awooop.eventlog.batches import EVERY, Served, fire_claim
from awooop.eventlog.runs import CurrentStep
from awooop.eventlog.state import RunState
from awooop.runs.leases import sessions
from awooop.runs.leases.batch import (
    claim_many,
    complete_many,
    fenced_record_many,
    journal_many,
    prepare_run_statements,
    sleep_many,
)
from awooop.runs.leases.rules import ClaimBatch, Completion, Fence, FencedWrite, Journal, Sleep
from awooop.runs.leases.single import fences, heartbeat

Written = list[RunState | LeaseLostError | UnstorableValueError]
# A completion's and journal events' answers: None when written (their rows are not read back:
# the worker has no use for them).
Made = list[LeaseLostError | UnstorableValueError | None]
Recorded = list[RunState | LeaseLostError | UnstorableValueError | None]
NOTIFY_MANY = "SELECT pg_notify($1, payload) FROM unnest($2::text[]) AS payload"


class RunStatements:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def claim_many(
        self,
        run_ids: list[uuid.UUID],
        worker_id: str,
        ttl_s: float,
        metadata: list[dict[str, Any] | None] | None = None,
        *,
        fair: bool = True,
        served: Served = EVERY,
    ) -> ClaimBatch:
        return await self.db.in_run_statement(
            lambda conn: claim_many(
                conn, run_ids, worker_id, ttl_s, metadata, fair=fair, served=served
            )
        )

    async def complete_many(self, completions: list[Completion]) -> Made:
        return await self.db.in_run_statement(lambda conn: complete_many(conn, completions))

    async def sleep_many(self, sleeps: list[Sleep]) -> Written:
        return await self.db.in_run_statement(lambda conn: sleep_many(conn, sleeps))

    async def heartbeat(
        self,
        worker_id: str,
        held: dict[uuid.UUID, int],
        ttl_s: float,
        steps: Mapping[uuid.UUID, CurrentStep] | None = None,
    ) -> set[uuid.UUID]:
        return await self.db.in_run_statement(
            lambda conn: heartbeat(conn, worker_id, held, ttl_s, steps)
        )

    async def fire_claim(
        self,
        held: list[tuple[uuid.UUID, int]],
        worker_id: str,
        ttl_s: float,
        metadata: dict[str, Any] | None = None,
        *,
        fair: bool = True,
        served: Served = EVERY,
    ) -> list[tuple[RunState, bool]]:
        """A worker's own due sleeps fired, and claimed by it where they may be
        (:func:`awooop.eventlog.batches.fire_claim`)."""
        return await self.db.in_run_statement(
            lambda conn: fire_claim(conn, held, worker_id, ttl_s, metadata, fair, served)
        )

    async def start_session(
        self, worker_id: str, ttl_s: float, after: sessions.Session | None = None
    ) -> tuple[sessions.Session, int]:
        """Begin the worker's session (one statement; ``after``: its last one), then give up
        the runs an earlier session of its id still holds, each batch a transaction of its
        own; answers the session and how many runs were given up. Raises E-RUN-002 when a
        later process holds the worker id (:func:`sessions.start`)."""
        started = await self.db.in_run_statement(
            lambda conn: sessions.start(conn, worker_id, ttl_s, after)
        )
        if started is None:
            raise LeaseLostError(
                f"worker id {worker_id!r} is held by a live session of another process: "
                "give each worker process an id of its own"
            )
        session, again = started
        given_up = 0
        while again:
            done = await self.db.in_platform_writes(
                lambda conn: sessions.give_up_earlier(conn, session)
            )
            given_up += done
            again = done == sessions.GIVE_UP_BATCH
        return session, given_up

    async def renew_session(self, session: sessions.Session, ttl_s: float) -> datetime | None:
        return await self.db.in_run_statement(lambda conn: sessions.renew(conn, session, ttl_s))

    async def end_session(self, session: sessions.Session) -> None:
        await self.db.in_run_statement(lambda conn: sessions.end(conn, session))

    async def fences(self, run_ids: list[uuid.UUID]) -> tuple[dict[uuid.UUID, Fence], datetime]:
        return await self.db.in_run_statement(lambda conn: fences(conn, run_ids))

    async def fenced_record_many(self, writes: list[FencedWrite]) -> Recorded:
        """The journals (:class:`Journal`) of RUNNING runs in one statement (None answers one
        written there), the other writes (and the journals of runs in a tool wait) in one
        transaction (their new states); answers in order."""
        journals = [w for w in writes if isinstance(w, Journal)]
        answers: dict[uuid.UUID, RunState | LeaseLostError | UnstorableValueError | None] = {}
        if journals:
            answers.update(
                await self.db.in_run_statement(lambda conn: journal_many(conn, journals))
            )
        rest = [w for w in writes if w.run_id not in answers]
        if rest:
            recorded = await self.db.in_run_transaction(lambda conn: fenced_record_many(conn, rest))
            answers.update(zip((w.run_id for w in rest), recorded, strict=True))
        return [answers[w.run_id] for w in writes]

    async def notify(self, channel: str, payloads: list[str]) -> None:
        """``pg_notify`` each of ``payloads`` on ``channel`` (a doorbell: one statement)."""
        await self.db.in_run_statement(lambda conn: conn.execute(NOTIFY_MANY, channel, payloads))

    async def prepare(self, connections: int) -> None:
        """Parse and plan every statement above on ``connections`` run-pool connections."""
        await self.db.on_run_connections(connections, prepare_run_statements)
