"""Schedules under a simulated clock: several ``schedules`` loop replicas on one clock, racing.

:class:`Replicas` holds three loop instances (each its own database pools, as three
processes would) built by the real ``schedule_loop`` with the test's clock; :meth:`race`
runs one iteration of each at once, through the loop framework's ``run_iteration`` (the
iteration's context, span, liveness gauge), and returns what each fired.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from awooop.core.config import Settings
from awooop.core.context import PLATFORM_PROJECT
from awooop.core.db import Database
from awooop.core.loops import LoopContext, LoopSpec, run_iteration
from awooop.loops import schedules as schedule_loop
from awooop.schedules import rules, store
from awooop.services import Services
from awooop.streams.keys import Keys


@dataclass
class Clock:
    """The simulated wall clock every replica reads."""

    at: datetime

    def now(self) -> datetime:
        return self.at

    def move(self, **delta: float) -> None:
        self.at += timedelta(**delta)

    def set(self, moment: datetime) -> None:
        self.at = moment


@dataclass
class Replicas:
    settings: Settings
    clock: Clock
    dbs: list[Database]
    reports: list[schedule_loop.Report] = field(default_factory=list)

    def specs(self) -> list[LoopSpec]:
        return [
            schedule_loop.schedule_loop(
                Services(settings=self.settings, db=db, redis=None, keys=keys(self.settings)),
                now=self.clock.now,
            )
            for db in self.dbs
        ]

    async def race(self) -> list[schedule_loop.Report]:
        """One iteration of every replica at once (through the loop framework); what each
        fired, also kept in ``reports``."""
        found: list[schedule_loop.Report] = []

        def recording(spec: LoopSpec, db: Database) -> LoopSpec:
            async def body(_ctx: LoopContext) -> None:
                found.append(await schedule_loop.fire_due(db, self.settings, self.clock.now))

            return LoopSpec(spec.name, spec.category, spec.interval_s, body)

        specs = [recording(s, db) for s, db in zip(self.specs(), self.dbs, strict=True)]
        oks = await asyncio.gather(
            *(run_iteration(s, LoopContext(project_id=PLATFORM_PROJECT)) for s in specs)
        )
        assert all(oks), "a replica's iteration failed"
        self.reports.extend(found)
        return found

    async def step(self, **delta: float) -> list[schedule_loop.Report]:
        self.clock.move(**delta)
        return await self.race()


def keys(settings: Settings) -> Keys:
    return Keys(settings.redis_key_prefix, settings.shard_count)


@asynccontextmanager
async def replicas(settings: Settings, clock: Clock, count: int = 3) -> AsyncIterator[Replicas]:
    dbs: list[Database] = []
    try:
        for _ in range(count):
            dbs.append(await Database.open(settings.database_url, max_size=2))
        yield Replicas(settings, clock, dbs)
    finally:
        await asyncio.gather(*(db.close() for db in dbs))


async def create(
    db: Database,
    settings: Settings,
    project: str,
    now: datetime,
    cron_text: str = "* * * * *",
    timezone: str = "Europe/Madrid",
    **options: Any,
) -> store.Schedule:
    definition = rules.define(
        cron_text=cron_text,
        timezone=timezone,
        contract_id=options.pop("contract_id", "nightly"),
        input=options.pop("input", {"report": "daily"}),
        **options,
    )
    return await db.in_tenant(
        project,
        lambda conn: store.create(
            conn,
            project,
            definition,
            actor="test",
            now=now,
            limit=settings.schedules_per_project,
        ),
    )


RUNS = """
SELECT provider_event_id, run_id, status, channel_type, contract_id, input
FROM awooop_run_state WHERE project_id = $1 ORDER BY provider_event_id
"""


async def runs(db: Database, project: str) -> list[dict[str, Any]]:
    rows = await db.in_platform(lambda conn: conn.fetch(RUNS, project))
    return [dict(r.items()) for r in rows]


async def fired_times(db: Database, project: str, schedule_id: uuid.UUID) -> list[str]:
    """The fire times (key form) of the schedule's runs, in order."""
    prefix = f"{rules.KEY_PREFIX}{schedule_id}:"
    return sorted(
        r["provider_event_id"].removeprefix(prefix)
        for r in await runs(db, project)
        if r["provider_event_id"].startswith(prefix)
    )


async def schedule(db: Database, project: str, schedule_id: uuid.UUID) -> store.Schedule:
    return await db.in_tenant(project, lambda conn: store.get(conn, project, schedule_id))
