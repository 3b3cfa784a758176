"""A healthy fleet pages nobody: a real Prometheus scrapes the scale-out layout, with the rules
exactly as shipped, and no alert may become pending or fire.

    .venv/bin/python ops/check_alerts_quiet.py [--minutes 20] [--scrape-s 5]

The layout, each a process of its own with its own metrics port, scraped under the job names of
``ops/prometheus/prometheus.yml``: ``awooop serve`` (awooop-serve), two ``awooop worker``
(awooop-worker), two ``awooop relay``, a leader and a standby (awooop-relay), ``awooop loops
run --skip relay`` (awooop-loops) and ``awooop projector`` (awooop-projector), on a fresh
database and Redis key prefix, with one run submitted every second through the producer
library. Every ``--scrape-s`` seconds (scrape and evaluation interval) the check reads
Prometheus' ``/api/v1/alerts``: an alert that is pending counts as a false page too, so a short
run catches a rule whose expression is true on a healthy fleet even when its ``for:`` is longer
than the run. It prints one JSON object and exits 0 when no alert was ever pending or firing and
every submitted run completed, 1 otherwise, 2 when Prometheus is missing
(``ops/install-prometheus.sh``). ``tests/integration/test_alerts_quiet.py`` runs it for two
minutes; twenty is the manual run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from prometheus_live import CLI, Scratch, alerts, free_port, query, report, wait_for

from awooop import producer
from awooop.core.db import Database

HANDLER = "awooop.examples.handlers:noop"
PROJECT = "quiet"
# (job, command, instances)
LAYOUT: list[tuple[str, list[str], int]] = [
    ("awooop-worker", ["worker", "--handler", HANDLER], 2),
    ("awooop-relay", ["relay"], 2),
    ("awooop-loops", ["loops", "run", "--skip", "relay"], 1),
    ("awooop-projector", ["projector"], 1),
]


async def submit_for(database_url: str, seconds: float) -> list[str]:
    """One run a second for ``seconds``; the keys submitted."""
    db = await Database.open(database_url, max_size=2)
    keys: list[str] = []
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            key = f"quiet-{len(keys)}"
            await producer.submit(db, PROJECT, producer.ChannelEvent("api", key, {"n": len(keys)}))
            keys.append(key)
            await asyncio.sleep(1.0)
    finally:
        await db.close()
    return keys


def unfinished(database_url: str) -> int:
    out = subprocess.run(
        [
            "psql",
            database_url,
            "-Atqc",
            "SELECT count(*) FROM awooop_run_state WHERE status <> 'COMPLETED'",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return int(out.stdout.strip())


def start_fleet(scratch: Scratch) -> dict[str, list[str]]:
    """The scale-out layout; the scrape targets by job."""
    http_port = free_port()
    scratch.start([*CLI, "serve", "--port", str(http_port)], "serve.log")
    targets: dict[str, list[str]] = {"awooop-serve": [f"127.0.0.1:{http_port}"]}
    for job, command, count in LAYOUT:
        for index in range(count):
            port = free_port()
            scratch.start(
                [*CLI, *command], f"{job}-{index}.log", {"AWOOOP_METRICS_PORT": str(port)}
            )
            targets.setdefault(job, []).append(f"127.0.0.1:{port}")
    return targets


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--scrape-s", type=float, default=5.0, help="scrape/evaluation interval")
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        print("check_alerts_quiet: prometheus missing: run ops/install-prometheus.sh")
        return 2
    interval = args.scrape_s
    with Scratch(args.pg, args.redis, Path(tempfile.mkdtemp(prefix="awooop-quiet-"))) as scratch:
        database_url = scratch.env["AWOOOP_DATABASE_URL"]
        scratch.migrate()
        targets = start_fleet(scratch)
        prom = scratch.prometheus(prometheus, interval, targets)
        wanted = sum(len(a) for a in targets.values())
        wait_for(
            f"Prometheus to find all {wanted} targets up",
            lambda: len(query(prom, 'up{job=~"awooop-.*"} == 1')) == wanted,
            timeout_s=180,
        )
        # Rules evaluated before the first scrapes (no target yet, no stats sample yet) are
        # pending at start: the fleet has settled once an evaluation finds none. One that stays
        # pending on a healthy fleet is a false page: the check fails with it below.
        settled = True
        try:
            wait_for("no alert pending after start-up", lambda: not alerts(prom), timeout_s=120)
        except SystemExit:
            settled = False
        seen: dict[str, dict[str, Any]] = {}
        started = time.monotonic()

        async def watch_and_load() -> list[str]:
            load = asyncio.create_task(submit_for(database_url, args.minutes * 60))
            while not load.done():
                for alert in await asyncio.to_thread(alerts, prom):
                    key = json.dumps(alert["labels"], sort_keys=True)
                    seen.setdefault(
                        key,
                        {
                            "labels": alert["labels"],
                            "state": alert["state"],
                            "after_s": round(time.monotonic() - started, 1),
                        },
                    )
                await asyncio.sleep(interval)
            return await load

        keys = asyncio.run(watch_and_load())
        wait_for(
            "every submitted run to complete",
            lambda: unfinished(database_url) == 0,
            timeout_s=120,
            every_s=1.0,
        )
        left = unfinished(database_url)
        ok = settled and not seen and left == 0 and bool(keys)
        return report(
            {
                "ok": ok,
                "minutes": args.minutes,
                "scrape_and_evaluation_interval_s": interval,
                "targets": targets,
                "settled_after_start": settled,
                "runs_submitted": len(keys),
                "runs_unfinished": left,
                "alerts_pending_or_firing": list(seen.values()),
                "logs": str(scratch.work),
            }
        )


if __name__ == "__main__":
    sys.exit(main())
