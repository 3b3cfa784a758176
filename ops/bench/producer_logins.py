"""Benchmark: what a producer login's policies cost per submit, beside the runtime's roles.

    .venv/bin/python ops/bench/producer_logins.py [--runs 1500] [--rounds 6] [--prefill 5000]

On a scratch database of AWOOOP_BENCH_PG_URL (migrated, dropped at the end; its tables hold
``--prefill`` runs with fresh statistics, as in ops/bench/producer_pool.py) with
``track_functions = all``, one connection per login (``producer.init_connection``'s plan
settings: one generic plan per statement) submits one run per transaction (``BEGIN``,
:func:`awooop.producer.set_tenant`, :func:`awooop.producer.submit`, ``COMMIT``):

- ``owner``: the database's owner (the server's superuser here: no row-level security at all);
- ``app``: the same login as ``awooop_app``, the runtime's tenant role (``tenant_isolation``
  only);
- ``producer``: a login bound to the project (``awooop tenants grant``): ``tenant_isolation``,
  the restrictive ``tenant_binding`` and the producer's write policies.

Per login: the SQL functions each submit calls, with their calls and self time per submit in
microseconds (``pg_stat_xact_user_functions`` over 200 submits in one transaction: the calls
the policies and the ingest statement's guard make); then rounds of ``--runs`` transactions,
the logins in turn, the order reversed every other round, the backend's CPU per transaction
(from /proc: the server must be local) and the client's. ``summary``: medians over the rounds
and their ratio to ``app``. Prints the JSON and writes it to
ops/bench/results/producer-logins-<time>.json.
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
from producer_pool import PROJECT, TICK, fresh_tables  # noqa: E402
from scratch import SERVER, Scratch, report  # noqa: E402

from awooop import producer  # noqa: E402
from awooop.core.config import load_settings  # noqa: E402
from awooop.core.pools import SERVICE_PLAN_SETTINGS  # noqa: E402
from awooop.ingest import tenants  # noqa: E402

LOGINS = ("owner", "app", "producer")
FUNCTIONS = """
SELECT funcname, calls, self_time FROM pg_stat_xact_user_functions ORDER BY funcname
"""


def cpu_ms(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / TICK


async def submits(conn: Any, count: int) -> tuple[float, float]:
    """``count`` transactions of one submit each: backend and client CPU ms per transaction."""
    settings, tag = load_settings(), uuid.uuid4().hex[:8]
    backend, client = cpu_ms(conn.get_server_pid()), time.process_time()
    for n in range(count):
        event = producer.ChannelEvent("api", f"{tag}-{n}", {"n": n})
        async with conn.transaction():
            await producer.set_tenant(conn, PROJECT)
            await producer.submit(conn, PROJECT, event, settings=settings)
    return (
        round((cpu_ms(conn.get_server_pid()) - backend) / count, 3),
        round((time.process_time() - client) * 1000 / count, 3),
    )


async def functions(conn: Any, count: int = 200) -> dict[str, dict[str, float]]:
    """The functions one submit calls: calls and self time (us) per submit."""
    settings, tag = load_settings(), uuid.uuid4().hex[:8]
    async with conn.transaction():
        await producer.set_tenant(conn, PROJECT)
        for n in range(count):
            event = producer.ChannelEvent("api", f"{tag}-{n}", {"n": n})
            await producer.submit(conn, PROJECT, event, settings=settings)
        rows = await conn.fetch(FUNCTIONS)
    return {
        r["funcname"]: {
            "calls": round(r["calls"] / count, 2),
            "self_us": round(r["self_time"] * 1000 / count, 1),
        }
        for r in rows
    }


async def main(runs: int, rounds: int, prefill: int) -> dict[str, Any]:
    role = f"awooop_bench_{uuid.uuid4().hex[:10]}"
    plans = dict(SERVICE_PLAN_SETTINGS)
    try:
        async with Scratch("producer_logins") as scratch:
            owner = await asyncpg.connect(scratch.url)
            await owner.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw-{role}'")
            await tenants.grant(owner, role, [PROJECT])
            await owner.execute(f"ALTER DATABASE \"{scratch.name}\" SET track_functions = 'all'")
            host = scratch.url.split("@", 1)[1]
            urls = {
                "owner": (scratch.url, plans),
                "app": (scratch.url, {**plans, "role": "awooop_app"}),
                "producer": (f"postgresql://{role}:pw-{role}@{host}", plans),
            }
            await fresh_tables(owner, urls["producer"][0], prefill)
            conns = {k: await asyncpg.connect(u, server_settings=s) for k, (u, s) in urls.items()}
            try:
                for conn in conns.values():
                    await producer.init_connection(conn)
                calls = {k: await functions(c) for k, c in conns.items()}
                measured: dict[str, list[tuple[float, float]]] = {k: [] for k in LOGINS}
                for index in range(rounds):
                    for login in LOGINS if index % 2 == 0 else reversed(LOGINS):
                        measured[login].append(await submits(conns[login], runs))
                        print(f"round {index + 1} {login}: {measured[login][-1]}", file=sys.stderr)
            finally:
                for conn in (*conns.values(), owner):
                    await conn.close()
    finally:
        server = await asyncpg.connect(SERVER)
        try:
            await server.execute(f"DROP ROLE IF EXISTS {role}")
        finally:
            await server.close()
    medians = {
        k: {
            "backend_cpu_ms_per_txn": round(statistics.median(b for b, _ in v), 3),
            "client_cpu_ms_per_txn": round(statistics.median(c for _, c in v), 3),
        }
        for k, v in measured.items()
    }
    return {
        "setup": {"runs": runs, "rounds": rounds, "prefill": prefill},
        "functions_per_submit": calls,
        "summary": {
            "medians": medians,
            "ratio_to_app": {
                k: {f: round(x / medians["app"][f], 3) for f, x in m.items()}
                for k, m in medians.items()
            },
        },
        "rounds": measured,
    }


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--prefill", type=int, default=5000)
    args = parser.parse_args()
    report(asyncio.run(main(args.runs, args.rounds, args.prefill)), "producer-logins")


if __name__ == "__main__":
    run()
