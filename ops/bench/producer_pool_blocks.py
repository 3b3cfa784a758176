"""Benchmark: producer_pool.py's modes interleaved in short blocks, for a ratio that the load of
a shared machine moves less.

    .venv/bin/python ops/bench/producer_pool_blocks.py [--runs 2000] [--block 100] [--rounds 5]
                        [--prefill 5000] [--modes database,pool_transaction,pool_producer]

producer_pool.py measures one mode at a time, a few seconds each; on a machine shared with other
work the load changes within that time, and the ratio of two modes' medians moved between 1.25
and 1.6 from run to run for the same code. Here every mode of a round is open at once, on the
same tables (``--prefill`` runs, then ``ANALYZE``, at the start of each round), and the modes
take turns every ``--block`` runs (A B C, C B A, ...) until each has submitted ``--runs``: two
modes are never more than a few hundred milliseconds apart. The modes are producer_pool.py's
(:data:`producer_pool.MODES`, the same transaction per run and the same logins); a pool made
here opens two connections (``min_size``) rather than asyncpg's ten, as one client uses one.

Per mode and round the figures of producer_pool.py: runs/s over the mode's own blocks, CPU per
run of the client (``time.process_time`` over the mode's blocks) and of the mode's own Postgres
backends (``/proc/<pid>/schedstat``: nanoseconds on a CPU, so a block's share is exact; the
server must be local), and the statements per run, counted over ``--warmup`` runs after the
measured ones (no query logger runs while CPU is measured). ``summary``: medians over the rounds
and their ratio to the first mode's; ``paired_ratio``: the median over the rounds of each
round's own ratio. Prints the JSON, written to ops/bench/results/producer-pool-blocks-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

import asyncpg  # noqa: E402
import producer_pool  # noqa: E402
from producer_pool import AS_OWNER, MODES, PLANS, PROJECT, fresh_tables  # noqa: E402
from scratch import SERVER, Scratch, report  # noqa: E402
from statement_kinds import Counted  # noqa: E402

from awooop.ingest import tenants  # noqa: E402


def on_cpu_ns(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            total += int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
        except OSError:  # the backend ended
            continue
    return total


class Mode:
    """One mode open for a round: its connections, its series, its accumulated figures."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.counted = Counted()
        self.client_s = self.server_s = self.wall_s = 0.0
        self.runs = 0

    async def open(self, url: str) -> None:
        self.acquire, self.close = await MODES[self.name](url, self.counted)
        self.series = producer_pool.producer_series(self.name, self.acquire)
        if self.name == "database":  # its sessions' one connection (sequential use), counted
            async with self.acquire():
                pass

    def pids(self) -> list[int]:
        return sorted({c.get_server_pid() for c in self.counted.conns if not c.is_closed()})

    async def block(self, count: int, pids: list[int]) -> None:
        server, client, wall = on_cpu_ns(pids), time.process_time(), time.perf_counter()
        await self.series(count, self.runs)
        self.wall_s += time.perf_counter() - wall
        self.client_s += time.process_time() - client
        self.server_s += (on_cpu_ns(pids) - server) / 1e9
        self.runs += count

    async def figures(self, warmup: int) -> dict[str, Any]:
        self.counted.resume()
        self.counted.kinds.clear()
        await self.series(warmup, 10**6)
        self.counted.pause()
        async with self.acquire() as conn:
            plans = await conn.fetchrow(PLANS)
        kinds = self.counted.kinds
        return {
            "runs_per_s": round(self.runs / self.wall_s, 1),
            "client_cpu_ms_per_run": round(self.client_s * 1000 / self.runs, 3),
            "backend_cpu_ms_per_run": round(self.server_s * 1000 / self.runs, 3),
            "stack_cpu_ms_per_run": round((self.client_s + self.server_s) * 1000 / self.runs, 3),
            "statements_per_run": round(sum(kinds.values()) / warmup, 2),
            "statements_by_kind": {k: round(v / warmup, 2) for k, v in sorted(kinds.items())},
            "backends": len(self.pids()),
            "ingest_plans_last_connection": {k: int(v or 0) for k, v in plans.items()},
        }


async def one_round(
    modes: list[str], url: str, owner_url: str, owner: Any, args: argparse.Namespace
) -> dict[str, dict[str, Any]]:
    await fresh_tables(owner, url, args.prefill)
    opened = [Mode(name) for name in modes]
    try:
        for mode in opened:
            await mode.open(owner_url if mode.name in AS_OWNER else url)
            await mode.series(args.warmup, -args.warmup)  # keys of their own, before 0
            mode.counted.pause()  # no query logger while CPU is measured
        pids = {mode.name: mode.pids() for mode in opened}
        for turn in range(-(-args.runs // args.block)):
            for mode in opened if turn % 2 == 0 else reversed(opened):
                await mode.block(min(args.block, args.runs - mode.runs), pids[mode.name])
        return {mode.name: await mode.figures(args.warmup) for mode in opened}
    finally:
        for mode in opened:
            if hasattr(mode, "close"):
                await mode.close()


async def main(modes: list[str], args: argparse.Namespace) -> dict[str, Any]:
    role = f"awooop_bench_{uuid.uuid4().hex[:10]}"
    rounds: list[dict[str, dict[str, Any]]] = []
    try:
        async with Scratch("producer_pool_blocks") as scratch:
            owner = await asyncpg.connect(scratch.url)
            try:
                await owner.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw-{role}'")
                await tenants.grant(owner, role, [PROJECT])
                url = f"postgresql://{role}:pw-{role}@{scratch.url.split('@', 1)[1]}"
                for index in range(args.rounds):
                    order = modes if index % 2 == 0 else list(reversed(modes))
                    one = await one_round(order, url, scratch.url, owner, args)
                    print(f"round {index + 1}: {one}", file=sys.stderr)
                    rounds.append(one)
            finally:
                await owner.close()
    finally:  # the scratch database is gone: nothing of the role is left
        server = await asyncpg.connect(SERVER)
        try:
            await server.execute(f"DROP ROLE IF EXISTS {role}")
        finally:
            await server.close()
    stack = "stack_cpu_ms_per_run"
    paired = {
        mode: round(statistics.median(r[mode][stack] / r[modes[0]][stack] for r in rounds), 3)
        for mode in modes
    }
    return {
        "setup": {k: v for k, v in vars(args).items() if k != "modes"} | {"modes": modes},
        "summary": producer_pool.summary(rounds, modes) | {"paired_ratio": {stack: paired}},
        "rounds": rounds,
    }


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="database,pool_transaction,pool_producer")
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--block", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--prefill", type=int, default=5000)
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - set(MODES)
    if unknown:
        raise SystemExit(f"unknown modes {sorted(unknown)}: choose from {sorted(MODES)}")
    report(asyncio.run(main(modes, args)), "producer-pool-blocks")


if __name__ == "__main__":
    run()
