"""The client processes of the cost benchmark (``cost.py`` starts them; not run by hand).

    python ops/bench/cost_producer.py produce own|caller RUNS WARMUP RATE OUT
    python ops/bench/cost_producer.py observe COUNT TIMEOUT_S OUT

Both take the scratch database, Redis and key prefix from the AWOOOP_* environment, and import
``awooop`` from the checkout under test (``PYTHONPATH``, that checkout's interpreter): this
script puts nothing of its own checkout on the path, so that ``cost.py --code DIR`` measures
DIR's producer library.

- ``produce``: ONE client submitting one run at a time, sequentially. ``own``:
  ``producer.submit(db, ...)`` (the library's own transaction, a tenant session); ``caller``:
  BEGIN, ``set_tenant``, ``submit(conn, ...)``, COMMIT on one connection (the caller's own
  transaction). RATE 0 submits as fast as the calls return, else paces RATE per second.
  WARMUP runs first, then prints ``ready`` and waits for a line on stdin (the parent takes its
  snapshots), submits RUNS runs, writes ``{"runs": [[run_id, unix time the call (or the
  COMMIT) returned], ...]}`` to OUT, prints ``done`` and waits for a last line before exiting
  (so that its CPU is still readable in /proc).
- ``observe``: a plain ``XREAD`` (no group: it takes nothing from the workers) on every work
  stream from the start, recording when each RunCreated entry arrived: Redis answers the
  blocked readers of a stream together after an XADD, so this is when the worker's XREADGROUP
  got the entry too, give or take process scheduling. Writes ``{run_id: [entry id ms, unix
  time received]}`` to OUT after COUNT entries or TIMEOUT_S seconds.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg
from redis.asyncio import Redis

from awooop.core.config import load_settings
from awooop.core.db import Database
from awooop.core.events import run_id_of_stream
from awooop.core.pools import init_connection
from awooop.producer import ChannelEvent, set_tenant, submit
from awooop.streams.envelope import FIELD, decode_envelope
from awooop.streams.keys import Keys

PROJECT = "bench"  # as worker.py


async def line() -> str:
    return await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)


def say(word: str) -> None:
    print(word, flush=True)


async def produce(mode: str, runs: int, warmup: int, rate: float, out: Path) -> None:
    settings = load_settings()
    db = await Database.open(settings.database_url, max_size=2) if mode == "own" else None
    conn = await asyncpg.connect(settings.database_url) if mode == "caller" else None
    if conn is not None:
        await init_connection(conn)  # the codecs a caller's pool sets up (docs/ingest.md)

    async def one(n: int) -> uuid.UUID:
        event = ChannelEvent("api", uuid.uuid4().hex, {"n": n})
        if db is not None:
            return (await submit(db, PROJECT, event, settings=settings)).run_id
        assert conn is not None
        async with conn.transaction():
            await set_tenant(conn, PROJECT)
            return (await submit(conn, PROJECT, event, settings=settings)).run_id

    async def series(count: int) -> list[tuple[str, float]]:
        done: list[tuple[str, float]] = []
        begin = time.perf_counter()
        for n in range(count):
            if rate > 0:
                delay = begin + n / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            run_id = await one(n)
            done.append((str(run_id), time.time()))
        return done

    try:
        await series(warmup)
        say("ready")
        await line()
        done = await series(runs)
        await asyncio.to_thread(out.write_text, json.dumps({"runs": done}))
        say("done")
        await line()
    finally:
        if db is not None:
            await db.close()
        if conn is not None:
            await conn.close()


async def observe(count: int, timeout_s: float, out: Path) -> None:
    settings = load_settings()
    keys = Keys(settings.redis_key_prefix, settings.shard_count)
    client: Any = Redis.from_url(settings.redis_url)
    last: dict[bytes, bytes] = {keys.work_stream(s).encode(): b"0-0" for s in keys.shards()}
    seen: dict[str, list[float]] = {}
    deadline = time.monotonic() + timeout_s
    say("ready")
    try:
        while len(seen) < count and time.monotonic() < deadline:
            for stream, entries in await client.xread(last, block=1000) or []:
                now = time.time()
                for entry_id, fields in entries:
                    last[stream] = entry_id
                    envelope = decode_envelope(fields[FIELD])
                    run_id = run_id_of_stream(envelope.stream_id)
                    if run_id is not None and envelope.event_type == "RunCreated":
                        seen.setdefault(str(run_id), [int(entry_id.split(b"-")[0]), now])
    finally:
        await client.aclose()
    await asyncio.to_thread(out.write_text, json.dumps(seen))


def main() -> None:
    if sys.argv[1] == "produce":
        mode, runs, warmup, rate, out = sys.argv[2:7]
        asyncio.run(produce(mode, int(runs), int(warmup), float(rate), Path(out)))
    elif sys.argv[1] == "observe":
        count, timeout_s, out = sys.argv[2:5]
        asyncio.run(observe(int(count), float(timeout_s), Path(out)))
    else:
        raise SystemExit(f"unknown command {sys.argv[1]!r}")


if __name__ == "__main__":
    main()
