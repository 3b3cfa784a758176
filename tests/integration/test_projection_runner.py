"""Projectors apply every event exactly once, whatever the delivery order (R-32)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from structlog.testing import capture_logs

from awooop.core.db import Database
from awooop.core.events import run_id_of_stream
from awooop.projections.diff import diff_table
from awooop.projections.registry import get, projector_names
from awooop.projections.replay import replay
from awooop.projections.run_state import run_state_spec
from awooop.projections.runner import Projector
from awooop.streams.envelope import Envelope
from tests.support.projection_deliveries import LogDelivery, log_envelopes
from tests.support.projection_workload import Workload

VIEW_TABLES = {
    "run_state_view": ["awooop_run_state_view", "awooop_run_counts"],
    "run_timeline": ["awooop_run_timeline"],
    "revision_history": ["awooop_revision_history"],
}
KEYS = {
    "awooop_run_state_view": "run_id",
    "awooop_run_counts": "project_id, status",
    "awooop_run_timeline": "run_id, version",
    "awooop_revision_history": "stream_id, version",
}


async def workload(db: Database, seed: int = 1) -> Workload:
    work = Workload(db, seed=seed)
    await work.run(walkers=3, runs_each=6, max_steps=10)
    await work.revisions("alpha", "triage", 3)
    await work.revisions("beta", "triage", 2)
    return work


async def views(db: Database) -> dict[str, list[dict[str, Any]]]:
    out = {}
    async with db.platform() as conn:
        for tables in VIEW_TABLES.values():
            for t in tables:
                rows = await conn.fetch(f"SELECT * FROM {t} ORDER BY {KEYS[t]}")
                out[t] = [dict(r.items()) for r in rows]
    return out


async def clear_views(db: Database) -> None:
    async with db.platform_writes() as conn:
        for tables in VIEW_TABLES.values():
            for t in tables:
                await conn.execute(f"DELETE FROM {t}")


async def deliver(
    projectors: list[Projector], envelopes: list[Envelope], concurrency: int = 8
) -> None:
    """Hand each envelope to every projector, ``concurrency`` at a time (as a consumer with
    max_in_flight would); a False answer means 'left pending': deliver it again."""
    for i in range(0, len(envelopes), concurrency):
        chunk = envelopes[i : i + concurrency]
        for p in projectors:
            pending = chunk  # each projector gets the whole chunk
            while True:
                results = await asyncio.gather(*(p.handle(LogDelivery(e)) for e in pending))
                if all(results):
                    break
                pending = [e for e, ok in zip(pending, results, strict=True) if not ok]


def projectors(db: Database) -> list[Projector]:
    return [Projector(db, get(name)) for name in projector_names()]


@pytest.mark.connections(11)
async def test_in_order_delivery_builds_views_equal_to_the_log_and_the_inline_table(
    db: Database, database_url: str
) -> None:
    work = await workload(db)
    await deliver(projectors(db), await log_envelopes(db))

    async with db.platform() as conn:
        spec = run_state_spec("awooop_run_state")
        same = await diff_table(conn, spec, "awooop_run_state", "awooop_run_state_view", None)
        assert same.total == 0, same.lines("run_id")
        counts = await conn.fetch(
            "SELECT project_id, status, count(*)::int AS runs FROM awooop_run_state "
            "GROUP BY 1, 2 ORDER BY 1, 2"
        )
        assert [tuple(r) for r in counts] == [
            tuple(r) for r in await conn.fetch("SELECT * FROM awooop_run_counts ORDER BY 1, 2")
        ]
        assert await conn.fetchval("SELECT count(*) FROM awooop_run_timeline") == (
            await conn.fetchval("SELECT count(*) FROM awooop_events WHERE stream_id LIKE 'run-%'")
        )
        assert (
            await conn.fetchval("SELECT count(*) FROM awooop_run_timeline WHERE trace_id IS NULL")
            == 0
        )
    for name in projector_names():
        report = await replay(database_url, get(name))
        assert report.differences == 0, report.lines()
    assert work.events > 0


async def test_duplicate_and_out_of_order_deliveries_give_the_in_order_view(db: Database) -> None:
    await workload(db, seed=2)
    envelopes = await log_envelopes(db)
    await deliver(projectors(db), envelopes)
    in_order = await views(db)
    await clear_views(db)

    shuffled = envelopes + random.Random(5).sample(envelopes, len(envelopes) // 2)
    random.Random(6).shuffle(shuffled)
    await deliver(projectors(db), shuffled, concurrency=5)
    assert await views(db) == in_order


async def test_a_gap_is_filled_from_the_log_never_skipped(db: Database) -> None:
    await workload(db, seed=3)
    envelopes = await log_envelopes(db)
    last: dict[str, Envelope] = {}
    for e in envelopes:
        last[e.stream_id] = e
    projector = Projector(db, get("run_timeline"))
    result = await projector.apply_events(
        [await _as_log_event(e) for e in last.values() if run_id_of_stream(e.stream_id) is not None]
    )
    run_events = [e for e in envelopes if run_id_of_stream(e.stream_id) is not None]
    assert result.applied == len(run_events)
    single = sum(
        1 for e in last.values() if run_id_of_stream(e.stream_id) is not None and e.version == 1
    )
    assert result.filled == len(run_events) - single  # all but the directly applied v1s
    async with db.platform() as conn:
        gaps = await conn.fetchval(
            "SELECT count(*) FROM (SELECT run_id, max(version) = count(*) AS dense "
            "FROM awooop_run_timeline GROUP BY run_id) x WHERE NOT dense"
        )
    assert gaps == 0


async def _as_log_event(envelope: Envelope) -> Any:
    from awooop.projections.base import LogEvent

    return LogEvent.from_envelope(envelope)


class Crash(Exception):
    pass


@pytest.mark.parametrize("where", ["before_commit", "after_commit_before_ack"])
async def test_a_projector_crashing_mid_batch_applies_every_event_exactly_once(
    db: Database, where: str
) -> None:
    await workload(db, seed=4)
    envelopes = await log_envelopes(db)
    crashed = 0
    rng = random.Random(11)

    def crashing(p: Projector) -> Projector:
        real_apply = p.projection.apply
        real_events = p.apply_events

        async def apply(*args: Any) -> None:
            nonlocal crashed
            await real_apply(*args)  # the view rows are written ...
            if where == "before_commit" and rng.random() < 0.3:
                crashed += 1
                raise Crash  # ... and the transaction dies before its commit

        async def apply_events(events: Any) -> Any:
            nonlocal crashed
            result = await real_events(events)  # committed ...
            if where == "after_commit_before_ack" and rng.random() < 0.3:
                crashed += 1
                raise Crash  # ... but the ack never happens
            return result

        p.projection.apply = apply  # type: ignore[method-assign]  # inject the crash
        p.apply_events = apply_events  # type: ignore[method-assign]  # inject the crash
        return p

    await deliver([crashing(p) for p in projectors(db)], envelopes, concurrency=6)
    assert crashed > 0
    crashed_views = await views(db)
    await clear_views(db)
    await deliver(projectors(db), envelopes)
    assert crashed_views == await views(db)


async def test_two_projector_processes_share_the_work_without_double_applying(
    db: Database,
) -> None:
    await workload(db, seed=5)
    envelopes = await log_envelopes(db)
    await deliver(projectors(db), envelopes)
    expected = await views(db)
    await clear_views(db)
    # a consumer group splits the entries between consumers: each sees about half
    rng = random.Random(9)
    halves: list[list[Envelope]] = [[], []]
    for e in envelopes:
        halves[rng.randrange(2)].append(e)
    a, b = projectors(db), projectors(db)
    await asyncio.gather(deliver(a, halves[0], 4), deliver(b, halves[1], 4))
    for p in a:
        await p.reconcile()  # streams whose tail went to the other consumer may end early
    assert await views(db) == expected


async def test_reconcile_heals_what_the_streams_lost(db: Database) -> None:
    await workload(db, seed=6)
    envelopes = await log_envelopes(db)
    await deliver(projectors(db), envelopes)
    expected = await views(db)
    await clear_views(db)
    await deliver(projectors(db), envelopes[: len(envelopes) // 3])  # Redis lost the rest
    healed = 0
    for p in projectors(db):
        healed += await p.reconcile()
    assert healed > 0
    assert await views(db) == expected
    assert sum([await p.reconcile() for p in projectors(db)]) == 0


@pytest.mark.connections(11)
async def test_a_projector_table_is_verified_and_swapped_like_run_state(
    db: Database, database_url: str
) -> None:
    await workload(db, seed=7)
    await deliver(projectors(db), await log_envelopes(db))
    async with db.platform_writes() as conn:
        victim = await conn.fetchval("SELECT run_id FROM awooop_run_timeline LIMIT 1")
        await conn.execute(
            "UPDATE awooop_run_timeline SET worker_id = 'forged' WHERE run_id = $1 AND version = 1",
            victim,
        )
        await conn.execute("DELETE FROM awooop_revision_history WHERE version = 2")
    timeline = await replay(database_url, get("run_timeline"))
    assert timeline.diffs[0].examples["different"] == [f"{victim}/1 (worker_id)"]
    history = await replay(database_url, get("revision_history"), swap=True)
    assert history.diffs[0].missing == 2 and history.swapped
    repaired = await replay(database_url, get("run_timeline"), swap=True)
    assert repaired.swapped
    for name in projector_names():
        assert (await replay(database_url, get(name))).differences == 0
    # the projector goes on from the swapped tables: everything is a duplicate now
    result = await Projector(db, get("run_timeline")).apply_events(
        [await _as_log_event(e) for e in await log_envelopes(db)]
    )
    assert result.applied == 0 and result.duplicates > 0


async def test_revision_history_follows_the_real_revision_write_path(db: Database) -> None:
    from awooop.projections.revisions import revision_history
    from awooop.revisions import writes as revisions

    ids = []
    for text in ("v1", "v2"):
        async with db.tenant("alpha") as conn:
            rev = await revisions.create_revision(conn, "alpha", "agent", "triage", {"p": text})
            await revisions.activate_revision(conn, "alpha", "agent", "triage", rev.revision_id)
        ids.append(rev.revision_id)
    await deliver([Projector(db, get("revision_history"))], await log_envelopes(db))
    async with db.tenant("alpha") as conn:
        history = await revision_history(conn, "alpha", "agent", "triage")
    assert [(h.event_type, h.revision_id, h.previous_revision_id) for h in history] == [
        ("RevisionCreated", ids[0], None),
        ("RevisionActivated", ids[0], None),
        ("RevisionCreated", ids[1], None),
        ("RevisionActivated", ids[1], ids[0]),
    ]
    async with db.tenant("beta") as conn:  # row-level security: another tenant sees nothing
        assert await revision_history(conn, "alpha", "agent", "triage") == []


async def test_one_streams_failure_leaves_only_that_streams_deliveries_pending(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R-19 for projector batches: a batch fails because of one stream's events; each stream
    is then applied on its own, so only that stream's deliveries stay pending."""
    await workload(db, seed=5)
    projector = Projector(db, get("run_timeline"))
    follow = [e for e in await log_envelopes(db) if projector.follows(e)]
    streams = sorted({e.stream_id for e in follow})
    poisoned = streams[len(streams) // 2]
    real_apply = projector.projection.apply

    async def apply(conn: Any, names: Any, to_apply: dict[str, Any]) -> None:
        if poisoned in to_apply:
            raise ValueError("a value the read model refuses")
        await real_apply(conn, names, to_apply)

    monkeypatch.setattr(projector.projection, "apply", apply)
    with capture_logs() as logs:
        results = await asyncio.gather(*(projector.handle(LogDelivery(e)) for e in follow))
    [failed] = [e for e in logs if e["event"] == "projector_batch_failed"]
    assert failed["events"] == len(follow)  # one batch held every stream
    for envelope, ok in zip(follow, results, strict=True):
        assert ok is (envelope.stream_id != poisoned)
    async with db.platform() as conn:
        stored = await projector.projection.load_versions(conn, projector.names, streams)
    latest: dict[str, int] = {}
    for e in follow:
        latest[e.stream_id] = max(latest.get(e.stream_id, 0), e.version)
    assert stored.get(poisoned, 0) == 0
    assert {s: v for s, v in stored.items() if s != poisoned} == {
        s: v for s, v in latest.items() if s != poisoned
    }
