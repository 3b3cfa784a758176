"""A retried run's attempts are linked (R-50): the first attempt is in the ingest trace, every
later one starts a trace of its own whose ``run`` span links to the ingest span and to the
previous attempt's ``run`` span, so Tempo leads from any attempt to the history; no link names a
span that was not exported. Real Postgres, Redis, relay and worker (streams and polling), an
in-memory span exporter."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import httpx
import msgspec
from opentelemetry.sdk.trace import ReadableSpan

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import DatabaseUnavailableError
from awooop.core.events import RunClaimed, StepCompleted
from awooop.http.app import create_app
from awooop.ingest import credentials
from awooop.loops import timers as timers_loop
from awooop.runs import run_rows
from awooop.services import Services
from awooop.streams.relay import Relay
from awooop.worker.context import RunContext
from awooop.worker.outcomes import own_trace
from awooop.worker.runtime import Worker
from awooop.worker.tracelinks import history_links
from tests.support.http import app_client
from tests.support.runs import create_runs
from tests.support.streams import create_run
from tests.support.waiting import eventually
from tests.support.workers import serving_worker, streaming_worker

PROJECT = "p-links"


async def flaky(run: RunContext) -> dict[str, Any]:
    """Does journaled work on every attempt; attempts 1 and 2 then lose the database."""

    async def work() -> int:
        return run.attempt

    await run.step(f"work-{run.attempt}", work)
    if run.attempt < 3:
        raise DatabaseUnavailableError("the database went away (test)")
    return {"attempts": run.attempt}


def run_spans(finished: list[ReadableSpan], run_id: uuid.UUID) -> dict[int, ReadableSpan]:
    found = {}
    for span in finished:
        attributes = span.attributes or {}
        if span.name == "run" and attributes.get("awooop.run_id") == str(run_id):
            found[int(attributes["awooop.attempt"])] = span  # type: ignore[arg-type]
    return found


def links_of(span: ReadableSpan, kind: str) -> list[tuple[int, int]]:
    return [
        (link.context.trace_id, link.context.span_id)
        for link in span.links
        if (link.attributes or {}).get("awooop.link") == kind
    ]


async def test_each_attempt_of_a_retried_run_links_to_the_ingest_and_the_previous_attempt(
    settings: Settings, spans: Any
) -> None:
    fast = msgspec.structs.replace(
        settings,
        lease_ttl_s=2.0,
        heartbeat_interval_s=0.2,
        # Polling takes a pending run once it is this old: longer than ingest -> worker start
        # takes on a loaded machine, so attempt 1 is the stream's (it was the poll's at 0.2 s).
        poll_interval_s=2.0,
        shutdown_grace_s=0.3,
    )
    services = await Services.open(fast, db_pool_size=4)
    try:
        _, token = await credentials.create_token(services.db, PROJECT, "api")
        transport = httpx.ASGITransport(app=create_app(services))
        async with httpx.AsyncClient(transport=transport, base_url="http://awooop") as client:
            answer = await client.post(
                f"/v1/projects/{PROJECT}/channels/api",
                json={"text": "retry me"},
                headers={"Authorization": f"Bearer {token}", "Idempotency-Key": str(uuid.uuid4())},
            )
        assert answer.status_code == 202, answer.text
        run_id = uuid.UUID(str(answer.json()["run_ids"][0]))
        relay = Relay(settings=fast, redis=services.redis, keys=services.keys)
        try:
            assert await relay.drain() >= 1
        finally:
            await relay.close()
        # Attempt 1 comes by the stream; after its lease expires the worker's polling takes
        # the run again (attempts 2 and 3).
        worker, intake = streaming_worker(
            services.db, fast, services.redis, handler=flaky, concurrency=2
        )
        async with serving_worker(worker, intake):

            async def status() -> Any:
                async with services.db.tenant(PROJECT) as conn:
                    return await conn.fetchval(
                        "SELECT status FROM awooop_run_state WHERE run_id = $1", run_id
                    )

            await eventually(
                status, equals="COMPLETED", timeout_s=60, interval_s=0.1, what="the run's status"
            )
    finally:
        await services.close()

    finished = list(spans.get_finished_spans())
    [ingest] = [s for s in finished if s.name == "ingest"]
    assert ingest.context is not None
    ingest_at = (ingest.context.trace_id, ingest.context.span_id)
    attempts = run_spans(finished, run_id)
    assert sorted(attempts) == [1, 2, 3], sorted(attempts)
    first = attempts[1]
    assert first.context is not None and first.context.trace_id == ingest_at[0]  # in it
    for number in (2, 3):
        span, previous = attempts[number], attempts[number - 1]
        assert span.context is not None and previous.context is not None
        assert span.parent is None, f"attempt {number} starts a trace of its own"
        assert span.context.trace_id != ingest_at[0]
        assert links_of(span, "ingest") == [ingest_at], span.links
        # the previous attempt's own run span (its context stored with its events)
        assert links_of(span, "previous_attempt") == [
            (previous.context.trace_id, previous.context.span_id)
        ], (number, span.links)
    # No link anywhere names a span that was not exported.
    exported = {(s.context.trace_id, s.context.span_id) for s in finished if s.context}
    for span in finished:
        for link in span.links:
            assert (link.context.trace_id, link.context.span_id) in exported, (span.name, link)


def test_which_attempts_start_their_own_trace() -> None:
    assert own_trace(2, None)  # a retry, whatever the context
    assert own_trace(1, None)  # nothing current: the polling path


INGEST = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
CLAIM_IN_UNSAMPLED_LOOP = "00-5bf92f3577b34da6a3ce929d0e0e4736-10f067aa0ba902b7-00"
RUN_SPAN = "00-6bf92f3577b34da6a3ce929d0e0e4736-20f067aa0ba902b7-01"
STEP_SPAN = "00-6bf92f3577b34da6a3ce929d0e0e4736-30f067aa0ba902b7-01"


async def test_the_previous_attempt_link_names_its_run_span_or_nothing(db: Database) -> None:
    """An attempt that wrote nothing but its claim (made in a polling loop iteration that was
    not sampled) gives no link; one whose events carry its exported ``run`` span, a link to
    that span, not to the step span its last event was written in."""
    run_id = await create_run(db, PROJECT, {"traceparent": INGEST})

    async def write(event: Any, metadata: dict[str, str]) -> None:
        await db.in_tenant(PROJECT, lambda conn: run_rows.record(conn, run_id, event, metadata))

    def claimed(s: Any, now: Any) -> RunClaimed:
        return RunClaimed(
            at=now,
            worker_id="w1",
            attempt=s.attempt_count + 1,
            lease_until=now + timedelta(minutes=1),
        )

    def stepped(s: Any, now: Any) -> StepCompleted:
        return StepCompleted(at=now, worker_id="w1", attempt=s.attempt_count, step="s")

    async def links(attempt: int) -> list[tuple[str, str]]:
        found = await db.in_tenant(PROJECT, lambda conn: history_links(conn, run_id, attempt))
        return [
            (str((link.attributes or {})["awooop.link"]), format(link.context.span_id, "016x"))
            for link in found
        ]

    await write(claimed, {"traceparent": CLAIM_IN_UNSAMPLED_LOOP})
    assert await links(2) == [("ingest", "00f067aa0ba902b7")]
    await write(stepped, {"traceparent": STEP_SPAN, "run_span": RUN_SPAN})
    assert await links(2) == [
        ("ingest", "00f067aa0ba902b7"),
        ("previous_attempt", "20f067aa0ba902b7"),
    ]


async def wait_then_return(run: RunContext) -> Any:
    """Sleeps 0.2 s (input ``sleep``) or waits for the event ``go``."""
    if run.input.get("sleep"):
        await run.sleep(timedelta(seconds=0.2))
        return "slept"
    return await run.wait_for_event("go")


async def test_an_attempt_resumed_from_a_wait_links_to_the_span_that_resumed_it(
    settings: Settings, db: Database, spans: Any
) -> None:
    """The timers loop fires a sleep and delivers a producer's pending signal, each batch in a
    span of its own trace whose context its events carry; the signal route's span for a
    signal sent through the API: each resumed attempt's ``run`` span links to that span."""
    sleeper, pending, routed = [
        (await create_runs(db, PROJECT, payload=payload))[0]
        for payload in ({"sleep": True}, {}, {})
    ]
    worker = Worker(db=db, settings=settings, handler=wait_then_return, concurrency=3)
    assert await worker.run_until_idle(max_s=30) == 3
    async with db.platform_writes() as conn:  # the producer's signal: the row alone, pending
        await conn.execute(
            "INSERT INTO awooop_signals (signal_id, project_id, run_id, name, signal_key, "
            "payload, sent_by, pending) VALUES ($1, $2, $3, 'go', 'k1', '1', 'p', true)",
            uuid.uuid4(),
            PROJECT,
            pending,
        )
    assert await timers_loop.deliver_once(db, 10) == (1, False)
    _, manage = await credentials.create_management_token(db, PROJECT, "manage")
    async with app_client(settings, db, bearer=manage) as http:
        sent = await http.post(
            f"/v1/projects/{PROJECT}/runs/{routed}/signals/go", json={"payload": 2, "key": "k"}
        )
        assert sent.status_code == 201 and sent.json()["delivered"], sent.text

    async def fired() -> int:
        return (await timers_loop.fire_once(db, 10))[0]

    await eventually(fired, equals=1, timeout_s=30, interval_s=0.05, what="the sleep fired")
    assert await worker.run_until_idle(max_s=30) == 3
    async with db.tenant(PROJECT) as conn:
        results = await conn.fetch(
            "SELECT run_id, status, result FROM awooop_run_state WHERE run_id = ANY($1)",
            [sleeper, pending, routed],
        )
    assert {r["run_id"]: (r["status"], r["result"]) for r in results} == {
        sleeper: ("COMPLETED", "slept"),
        pending: ("COMPLETED", 1),
        routed: ("COMPLETED", 2),
    }

    finished = list(spans.get_finished_spans())
    by_name = {
        name: [s for s in finished if s.name == name]
        for name in ("timers fire", "signals deliver", "signal")
    }
    for run_id, name in (
        (sleeper, "timers fire"),
        (pending, "signals deliver"),
        (routed, "signal"),
    ):
        [resumer] = by_name[name]
        assert resumer.context is not None
        if name != "signal":
            assert resumer.parent is None and resumer.attributes == {"awooop.runs": 1}
        attempts = run_spans(finished, run_id)
        assert sorted(attempts) == [1, 2]
        second, first = attempts[2], attempts[1]
        assert links_of(second, "resumed_by") == [
            (resumer.context.trace_id, resumer.context.span_id)
        ], (name, second.links)
        assert links_of(first, "resumed_by") == []
    # An iteration that resumes nothing opens no such span.
    assert await timers_loop.fire_once(db, 10) == (0, False)
    assert await timers_loop.deliver_once(db, 10) == (0, False)
    assert len([s for s in spans.get_finished_spans() if s.name == "timers fire"]) == 1
