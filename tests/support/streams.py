"""Helpers for the stream and relay tests: producers on the real write path, collectors."""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.events import RunClaimed, StepCompleted
from awooop.core.loops import run_loop
from awooop.eventlog import runs as log_runs
from awooop.loops.relay import relay_spec
from awooop.runs import run_rows
from awooop.streams.consumer import GroupConsumer
from awooop.streams.delivery import Delivery
from awooop.streams.envelope import FIELD, Envelope, decode_envelope
from awooop.streams.keys import Keys
from awooop.streams.relay import Relay
from tests.support.factories import created


async def create_run(
    db: Database, project: str, metadata: dict[str, Any] | None = None
) -> uuid.UUID:
    """One run (PENDING, event RunCreated v1) through the write path, committed."""
    run_id = uuid.uuid4()

    async def once(conn: Any) -> None:
        now = await conn.fetchval("SELECT now()")
        await log_runs.create_run(conn, created(run_id, project_id=project, at=now), metadata)

    await db.in_tenant(project, once)
    return run_id


async def claim(db: Database, project: str, run_id: uuid.UUID, worker: str = "w1") -> None:
    await db.in_tenant(
        project,
        lambda conn: run_rows.record(
            conn,
            run_id,
            lambda s, now: RunClaimed(
                at=now,
                worker_id=worker,
                attempt=s.attempt_count + 1,
                lease_until=now + timedelta(seconds=60),
            ),
        ),
    )


async def step(db: Database, project: str, run_id: uuid.UUID, name: str) -> None:
    await db.in_tenant(
        project,
        lambda conn: run_rows.record(
            conn,
            run_id,
            lambda s, now: StepCompleted(
                at=now, worker_id=s.worker_id or "w1", attempt=s.attempt_count, step=name
            ),
        ),
    )


async def committed_event_ids(db: Database) -> set[uuid.UUID]:
    async with db.platform() as conn:
        rows = await conn.fetch("SELECT event_id FROM awooop_events")
    return {r["event_id"] for r in rows}


@dataclass
class Collector:
    """A handler that records every delivery (and can be told to fail)."""

    deliveries: list[Delivery] = field(default_factory=list)
    ok: bool = True

    async def __call__(self, delivery: Delivery) -> bool:
        self.deliveries.append(delivery)
        return self.ok

    def event_ids(self) -> set[uuid.UUID]:
        return {d.envelope.event_id for d in self.deliveries}

    def versions_by_stream(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = defaultdict(list)
        for d in self.deliveries:
            out[d.envelope.stream_id].append(d.envelope.version)
        return out


def first_occurrences(versions: list[int]) -> list[int]:
    seen: set[int] = set()
    out = []
    for v in versions:
        if v not in seen:
            seen.add(v)
            out.append(v)
    return out


def keys_for(settings: Settings) -> Keys:
    return Keys(settings.redis_key_prefix, settings.shard_count)


@asynccontextmanager
async def running_relay(relay: Relay, settings: Settings) -> AsyncIterator[asyncio.Task[None]]:
    """The relay loop in the background until the block ends; then a clean stop."""
    stop = asyncio.Event()
    task = asyncio.create_task(run_loop(relay_spec(relay, settings), stop))
    try:
        yield task
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        await relay.close()


@asynccontextmanager
async def running_consumer(consumer: GroupConsumer) -> AsyncIterator[asyncio.Task[None]]:
    stop = asyncio.Event()
    task = asyncio.create_task(consumer.run(stop))
    try:
        yield task
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def published_envelopes(redis: Any, keys: Keys) -> list[Envelope]:
    """Every envelope in the events streams of every shard, in stream order (XRANGE)."""
    found: list[Envelope] = []
    for shard in keys.shards():
        for _entry_id, fields in await redis.xrange(keys.events_stream(shard)):
            found.append(decode_envelope(fields[FIELD]))
    return found


def check_published_in_order(envelopes: list[Envelope], logged: set[uuid.UUID]) -> None:
    """The consumer-side checks of the relay tests on what the events streams hold: every
    logged event is there, nothing that is not in the log is there, and in each run's stream
    the first copy of every version comes in version order, 1 to the last without a gap."""
    published = {e.event_id for e in envelopes}
    assert logged <= published, f"{len(logged - published)} logged events never published"
    assert published <= logged, f"{len(published - logged)} published events not in the log"
    versions: dict[str, list[int]] = defaultdict(list)
    for envelope in envelopes:
        versions[envelope.stream_id].append(envelope.version)
    for stream_id, seen in versions.items():
        assert first_occurrences(seen) == sorted(set(seen)), stream_id
        assert sorted(set(seen)) == list(range(1, max(seen) + 1)), stream_id
