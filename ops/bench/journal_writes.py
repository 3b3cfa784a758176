"""Benchmark: a batch of journal writes (a model call and the step it answers, as
``run.llm_step`` writes them), the one-statement way (``journal_many.sql``) against the
transactional way (``fenced_record_many``: lock, apply in Python, rows and events written), in
one process, interleaved.

    .venv/bin/python ops/bench/journal_writes.py [--runs 1024] [--batch 64] [--rounds 5]
                                                 [--steps 6] [--answer-bytes 400]

On a scratch database (migrated, dropped at the end): ``--runs`` runs claimed by one worker;
then, per round, each mode writes ``--steps`` steps of every run in batches of ``--batch``
runs (the worker's group commit: ``AWOOOP``'s write batch is 64), the modes taking turns batch
by batch, on the worker's own path (``RunStatements``, the run pool). Per mode: the client's CPU
per step (``time.process_time``), the Postgres backend's (``/proc/<pid>/schedstat`` of the run
pool's one connection: the server must be local) and the wall time per batch; ``summary``:
medians over the rounds and the one-statement way's ratio to the transactional one. Prints the
JSON, written to ops/bench/results/journal-writes-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

from producer_pool_blocks import on_cpu_ns  # noqa: E402
from scratch import Scratch, report  # noqa: E402

from awooop.core.db import Database  # noqa: E402
from awooop.core.events import Event, StepCompleted  # noqa: E402
from awooop.runs import leases  # noqa: E402
from tests.support.factories import event_for  # noqa: E402
from tests.support.runs import create_runs  # noqa: E402

PROJECT = "bench"
WORKER = "w1"
MODES = ("transaction", "statement")


def events_of(step: str, answer: str) -> Any:
    def events(at: datetime) -> tuple[Event, ...]:
        called = msgspec.structs.replace(
            event_for("ModelCalled", None, at),
            worker_id=WORKER,
            attempt=1,
            prompt="a prompt of a step " * 4,
            answer=answer,
            input_tokens=40,
            output_tokens=90,
        )
        result = {"text": answer, "model": "local", "tokens": 90}
        done = StepCompleted(at=at, worker_id=WORKER, attempt=1, step=step, result=result)
        return (called, done)

    return events


def write_of(mode: str, run_id: uuid.UUID, step: str, answer: str) -> leases.FencedWrite:
    events = events_of(step, answer)(leases.JOURNAL_CLOCK)
    journal = leases.Journal(run_id, WORKER, 1, events=events)
    if mode == "statement":
        return journal
    return leases.FencedWrite(run_id, WORKER, 1, journal.make_event)  # the same events


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    async with Scratch("journal") as scratch:
        db = await Database.open(scratch.url, max_size=1, run_min_size=1)
        try:
            statements = leases.RunStatements(db)
            async with db.run_pool.acquire() as conn:
                backend = [conn.get_server_pid()]
            runs = await create_runs(db, PROJECT, args.runs, per_transaction=500)
            for start in range(0, len(runs), 500):
                await statements.claim_many(runs[start : start + 500], WORKER, 3600)
            halves = {"transaction": runs[::2], "statement": runs[1::2]}
            answer = "x" * args.answer_bytes
            rounds = []
            for round_no in range(args.rounds):
                figures: dict[str, dict[str, Any]] = {
                    m: {"client_s": 0.0, "backend_ns": 0, "walls": []} for m in MODES
                }
                for step_no in range(args.steps):
                    step = f"r{round_no}s{step_no}"
                    batches = {
                        m: [
                            halves[m][i : i + args.batch]
                            for i in range(0, len(halves[m]), args.batch)
                        ]
                        for m in MODES
                    }
                    for n in range(len(batches["statement"])):
                        order = MODES if n % 2 == 0 else MODES[::-1]
                        for mode in order:
                            writes = [write_of(mode, r, step, answer) for r in batches[mode][n]]
                            cpu, ns, wall = time.process_time(), on_cpu_ns(backend), time.time()
                            answers = await statements.fenced_record_many(writes)
                            f = figures[mode]
                            f["walls"].append(time.time() - wall)
                            f["client_s"] += time.process_time() - cpu
                            f["backend_ns"] += on_cpu_ns(backend) - ns
                            assert all(not isinstance(a, Exception) for a in answers), answers
                written = args.steps * len(runs) // 2
                rounds.append(
                    {
                        m: {
                            "client_ms_per_step": round(f["client_s"] * 1e3 / written, 4),
                            "backend_ms_per_step": round(f["backend_ns"] / 1e6 / written, 4),
                            "stack_ms_per_step": round(
                                (f["client_s"] * 1e3 + f["backend_ns"] / 1e6) / written, 4
                            ),
                            "batch_wall_ms_p50": round(statistics.median(f["walls"]) * 1e3, 3),
                        }
                        for m, f in figures.items()
                    }
                )
        finally:
            await db.close()
    keys = ("client_ms_per_step", "backend_ms_per_step", "stack_ms_per_step", "batch_wall_ms_p50")
    medians = {m: {k: statistics.median(r[m][k] for r in rounds) for k in keys} for m in MODES}
    return {
        "benchmark": "journal-writes",
        "command": " ".join(sys.argv),
        "at": datetime.now(UTC).isoformat(),
        "config": vars(args),
        "summary": {
            "medians": medians,
            "statement_over_transaction": {
                k: round(medians["statement"][k] / medians["transaction"][k], 3) for k in keys
            },
        },
        "rounds": rounds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=6, help="steps per run per round")
    parser.add_argument("--answer-bytes", type=int, default=400)
    report(asyncio.run(measure(parser.parse_args())), "journal-writes")


if __name__ == "__main__":
    main()
