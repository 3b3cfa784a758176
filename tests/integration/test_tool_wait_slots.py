"""Tool waits hold no concurrency slot (migration 0135, awooop.worker.tool_waits), on real
Postgres: a run waiting for its tools frees its key's slot for another run; when its tools
answer it continues only once re-admitted under its key, in the transaction of its return to
RUNNING; refused, it stays WAITING_TOOL with its lease, blocked_on says it waits for a slot,
and it goes on when the slot frees. Parallel calls of one run are one wait: one admission.
Admission races and transactions cut before their commit (a kill -9) never over-admit, and a
dead waiter's lease is the only thing it ever held."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from awooop import producer
from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import LeaseLostError
from awooop.core.events import RunCompleted, ToolResultReceived, ToolWaitStarted
from awooop.runs import concurrency, leases
from awooop.runs.blocked import Reason, ShardFacts, decide
from awooop.runs.blocked_facts import run_facts
from awooop.runs.pause_rules import Scope
from awooop.worker.assembly import build_worker
from tests.support import handlers
from tests.support.handlers import executions, max_overlap
from tests.support.runs import event_types, load
from tests.support.waiting import eventually

P = "proj-tool-slots"
KEY = "channel:api/cust-a"


@pytest.fixture(autouse=True)
def clean_effects() -> Iterator[None]:
    handlers.EFFECTS.clear()
    handlers.TOOL_GATES.clear()
    yield
    handlers.EFFECTS.clear()
    handlers.TOOL_GATES.clear()


async def limit(db: Database, max_expr: str = "1") -> None:
    await db.in_tenant(
        P,
        lambda c: concurrency.set_limit(
            c,
            P,
            Scope.CHANNEL,
            "api",
            key_expr="input.customer",
            max_expr=max_expr,
            global_max=None,
            depth_cap=None,
            actor="test",
        ),
    )


async def submit(db: Database, settings: Settings, **body: Any) -> uuid.UUID:
    event = producer.ChannelEvent("api", uuid.uuid4().hex, {"customer": "cust-a", **body})
    return (await producer.submit(db, P, event, settings=settings)).run_id


async def holding(db: Database) -> int:
    """The key's runs holding a slot, as awooop_concurrency_admit counts them."""
    return int(
        await db.in_platform(
            lambda c: c.fetchval(
                "SELECT count(*) FROM awooop_run_state WHERE concurrency_key = $1"
                " AND status = 'RUNNING' AND lease_until > now()",
                KEY,
            )
        )
    )


def effects_of(run_id: uuid.UUID, what: str) -> list[float]:
    return [e["t"] for e in handlers.EFFECTS if e["run_id"] == str(run_id) and e["what"] == what]


@pytest.mark.connections(9)
async def test_a_tool_wait_frees_its_slot_and_waits_for_one_to_continue(
    db: Database, fast: Settings
) -> None:
    await limit(db)
    a = await submit(db, fast, sleep=0.1, tools=["flights", "hotels"], gate="a")
    b = await submit(db, fast, sleep=1.5)
    w = build_worker(db=db, settings=fast, handler=handlers.keyed, concurrency=4).worker
    task = asyncio.create_task(w.run_until_idle(max_s=60))
    samples: list[int] = []

    async def sample() -> None:
        while not task.done():
            samples.append(await holding(db))
            await asyncio.sleep(0.05)

    sampler = asyncio.create_task(sample())
    try:
        # A waits for its two tools: its slot is free, so B (same key, limit 1) starts
        await eventually(lambda: effects_of(b, "begin"), what="B started while A waits")
        waiting = await load(db, P, a)
        assert waiting.status == "WAITING_TOOL" and waiting.attempt_count == 1
        # Both tools answer while B executes: A is refused, keeps its lease, says why
        handlers.TOOL_GATES.setdefault("a", asyncio.Event()).set()

        async def slot_wait() -> Any:
            facts = await db.in_platform(lambda c: run_facts(c, [a]))
            said = decide(facts[a], ShardFacts(shard=0, known=False))
            return said if said and said.reason is Reason.OVER_CONCURRENCY_LIMIT else None

        said = await eventually(slot_wait, what="A's blocked_on: a slot of its key")
        assert "answered: waits for a slot of concurrency key channel:api/cust-a" in said.summary
        assert "(1 of 1 executing)" in said.summary
        assert len(effects_of(a, "answered:flights") + effects_of(a, "answered:hotels")) == 2
        still = await load(db, P, a)
        assert still.status == "WAITING_TOOL" and still.worker_id == waiting.worker_id
        assert len(effects_of(a, "begin")) == 1  # not resumed while B executes
        assert await task == 2
    finally:
        await asyncio.wait([task], timeout=30)
        sampler.cancel()

    done_a, done_b = await load(db, P, a), await load(db, P, b)
    assert (done_a.status, done_b.status) == ("COMPLETED", "COMPLETED")
    assert done_a.attempt_count == 1  # the same attempt went on: no retry
    assert done_a.saga_steps["tool:flights"]["result"] == {"tool": "flights"}
    assert done_a.saga_steps["tool:hotels"]["result"] == {"tool": "hotels"}
    # A went on only after B ended; the key never had two executing
    [b_end] = effects_of(b, "end")
    assert min(effects_of(a, "answered:flights") + effects_of(a, "answered:hotels")) < b_end
    assert effects_of(a, "begin")[1] >= b_end
    stretches = executions(handlers.EFFECTS, {str(a), str(b)}, {}, 0.0)
    assert len(stretches) == 3 and max_overlap(stretches) == 1, stretches
    assert samples and max(samples) <= 1
    # one wait of the run for both calls: one return to RUNNING, after both answers
    types = await event_types(db, P, a)
    tools = [t for t in types if t.startswith("Tool")]
    assert tools == [
        "ToolWaitStarted",
        "ToolWaitStarted",
        "ToolResultReceived",
        "ToolResultReceived",
    ]
    open_waits = await db.in_platform(
        lambda c: c.fetchval("SELECT count(*) FROM awooop_llm_waits WHERE ended_at IS NULL")
    )
    assert open_waits == 0


async def _waiting_for_tool(db: Database, settings: Settings, worker: str) -> uuid.UUID:
    """A keyed run claimed by ``worker`` (admitted) and now waiting for its tool."""
    run_id = await submit(db, settings)
    claimed = await db.in_tenant(P, lambda c: leases.claim(c, run_id, worker, 30.0))
    assert claimed is not None, "the claim was refused: the key is full"
    await db.in_tenant(
        P,
        lambda c: leases.fenced_record(
            c,
            run_id,
            worker,
            1,
            lambda _s, now: ToolWaitStarted(at=now, worker_id=worker, attempt=1, tool="t"),
        ),
    )
    return run_id


async def readmit(db: Database, run_id: uuid.UUID, worker: str) -> bool:
    _, admitted = await db.in_tenant(P, lambda c: concurrency.readmit(c, run_id, worker, 1))
    return admitted


@pytest.mark.connections(9)
async def test_readmission_never_over_admits_and_a_cut_transaction_holds_nothing(
    db: Database, fast: Settings
) -> None:
    await limit(db)
    waiters = {await _waiting_for_tool(db, fast, f"w{i}"): f"w{i}" for i in range(4)}
    assert await holding(db) == 0  # four runs of a key limited to 1, none holding its slot

    # A transaction that took the slot and was cut before its commit (kill -9) holds nothing.
    class Cut(Exception):
        pass

    first, first_worker = next(iter(waiters.items()))

    async def admitted_then_cut(conn: Any) -> None:
        assert (await concurrency.readmit(conn, first, first_worker, 1))[1]
        raise Cut

    with pytest.raises(Cut):
        await db.in_tenant(P, admitted_then_cut)
    assert await holding(db) == 0

    # Every waiter and a fresh claim race for the one slot: exactly one gets it.
    fresh = await submit(db, fast)

    async def claim_fresh() -> bool:
        got = await db.in_tenant(P, lambda c: leases.claim(c, fresh, "w-new", 30.0))
        return got is not None

    async def readmit_and_continue(run_id: uuid.UUID, worker: str) -> bool:
        async def tx(conn: Any) -> bool:
            _, ok = await concurrency.readmit(conn, run_id, worker, 1)
            if ok:  # the transition, in the admission's transaction (as tool_waits writes it)
                await leases.fenced_record(
                    conn,
                    run_id,
                    worker,
                    1,
                    lambda _s, now: ToolResultReceived(
                        at=now, worker_id=worker, attempt=1, tool="t"
                    ),
                )
            return ok

        return bool(await db.in_tenant(P, tx))

    results = await asyncio.gather(
        claim_fresh(), *(readmit_and_continue(r, w) for r, w in waiters.items())
    )
    assert sum(results) == 1, results
    assert await holding(db) == 1
    winner_run = [fresh, *waiters][results.index(True)]
    # The others stay WAITING_TOOL with their leases; one of them gets the slot once it frees
    losers = [(r, w) for r, w in waiters.items() if r != winner_run]
    for run_id, _ in losers:
        assert (await load(db, P, run_id)).status == "WAITING_TOOL"
    assert not any([await readmit(db, r, w) for r, w in losers])
    winner = await load(db, P, winner_run)
    await db.in_tenant(
        P,
        lambda c: leases.fenced_record(
            c,
            winner_run,
            winner.worker_id or "",
            1,
            lambda _s, now: RunCompleted(at=now, worker_id=winner.worker_id or "", attempt=1),
        ),
    )
    assert await holding(db) == 0
    run_id, worker = losers[0]
    assert await readmit_and_continue(run_id, worker)
    assert await holding(db) == 1

    # A waiter whose worker died: its lease expires and the fence refuses its re-admission;
    # it never held a slot, and the reaper's requeue leaves it to admission like any run.
    dead, dead_worker = losers[1]
    await db.in_platform_writes(
        lambda c: c.execute(
            "UPDATE awooop_run_state SET lease_until = now() - interval '1 second'"
            " WHERE run_id = $1",
            dead,
        )
    )
    with pytest.raises(LeaseLostError):
        await readmit(db, dead, dead_worker)
    assert await holding(db) == 1
