"""The producer process of the scheduler benchmark (``scheduler.py`` starts it; not run by hand).

    python ops/bench/scheduler_producer.py KEYS

It takes the database from the AWOOOP_* environment and imports ``awooop`` from the revision
under test (``PYTHONPATH``: the side's checkout first), so that each side's runs are written
by that side's intake (its concurrency key computed by its code). It prints ``ready``, then
answers each line of stdin:

- ``paced COUNT RATE``: COUNT runs, one ``submit_many`` call of one run every 1/RATE s;
- ``burst COUNT BATCH [PROJECT]``: COUNT runs in ``submit_many`` calls of BATCH runs, as fast
  as they go, of PROJECT (default ``bench``; ``fairness.py`` submits for two projects);
- any other line (``cost.Client.finish`` says ``go``): exits;

with ``done`` once the runs are committed. Run number n has the input
``{"customer_id": scheduler_stats.customer_id(n, KEYS)}`` (n counts on over the commands).
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid

from scheduler_stats import customer_id

from awooop.core.config import load_settings
from awooop.core.db import Database
from awooop.producer import ChannelEvent, submit_many

PROJECT = "bench"  # as worker.py


async def main(keys: int) -> None:
    settings = load_settings()
    db = await Database.open(settings.database_url, max_size=2)
    loop = asyncio.get_running_loop()
    n = 0

    async def batch(count: int, project: str = PROJECT) -> None:
        nonlocal n
        events = [
            ChannelEvent("api", uuid.uuid4().hex, {"customer_id": customer_id(n + i, keys)})
            for i in range(count)
        ]
        n += count
        await submit_many(db, project, events, settings=settings)

    try:
        print("ready", flush=True)
        while True:
            words = (await loop.run_in_executor(None, sys.stdin.readline)).split()
            if not words or words[0] not in ("paced", "burst"):
                return
            count = int(words[1])
            if words[0] == "paced":
                rate = float(words[2])
                begin = time.perf_counter()
                for i in range(count):
                    delay = begin + i / rate - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    await batch(1)
            else:
                size, project = int(words[2]), (words[3:] or [PROJECT])[0]
                for start in range(0, count, size):
                    await batch(min(size, count - start), project)
            print("done", flush=True)
    finally:
        await db.close()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
