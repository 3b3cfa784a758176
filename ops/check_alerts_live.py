"""End-to-end alert check: a real Prometheus scrapes a real ``awooop up``, the process stops,
and ``BackgroundLoopStale`` must fire within the documented time.

    .venv/bin/python ops/check_alerts_live.py [--signal TERM|KILL|STOP] [--scrape-s 5]

What it does, in order:

1. creates a fresh database on the local PostgreSQL (``--pg``, default
   ``postgresql://postgres@127.0.0.1:5432``) and migrates it (``awooop migrate``), with a fresh
   Redis key prefix on ``--redis``;
2. starts ``awooop up --workers 1`` with ``AWOOOP_METRICS_PORT`` on a free port, and the
   Prometheus server (``prometheus``; ``ops/install-prometheus.sh`` installs it from Debian's
   package) scraping it as job ``awooop-up`` every ``--scrape-s`` seconds, with the rules of
   ``ops/prometheus/rules/`` exactly as shipped (evaluated at the same interval);
3. waits until Prometheus holds the loops' last-success times and no loop alert is firing,
   then stops the process (SIGTERM by default; ``--signal STOP`` freezes it instead, the
   process stays alive but answers nothing);
4. polls Prometheus' ``/api/v1/alerts`` until ``BackgroundLoopStale`` fires for the ``relay``
   loop, noting when ``ProcessDown`` fired, runs the runbook's first check
   (``awooop loops list``: the relay's last run and where it ran) and prints one JSON object.

Documented times (docs/operations.md, Alerts): ``ProcessDown`` 60 s after the process's last
answered scrape plus up to one evaluation interval; ``BackgroundLoopStale`` 300 s after the
loop's last success plus up to one evaluation interval. The relay loop succeeds every second,
so its last success is within one scrape interval (+1 s) before the stop. The check passes
(exit 0) when each alert fires no earlier than its threshold - scrape - 2 s and no later than
its threshold + 2 x interval + 5 s (polling) after the stop. Takes about 6 minutes, so it is
not part of ``make test``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from prometheus_live import CLI, Scratch, firing, free_port, query, report, wait_for

STALE_S = 300.0  # the threshold of BackgroundLoopStale
DOWN_S = 60.0  # ProcessDown: no scrape answered for a minute


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--signal", default="TERM", choices=["TERM", "KILL", "STOP"])
    parser.add_argument("--scrape-s", type=float, default=5.0, help="scrape/evaluation interval")
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--timeout-s", type=float, default=STALE_S + 120)
    args = parser.parse_args()
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        print("check_alerts_live: prometheus missing: run ops/install-prometheus.sh")
        return 2
    interval = args.scrape_s
    with Scratch(args.pg, args.redis, Path(tempfile.mkdtemp(prefix="awooop-alerts-"))) as scratch:
        scratch.migrate()
        metrics_port, http_port = free_port(), free_port()
        up = scratch.start(
            [*CLI, "up", "--workers", "1", "--port", str(http_port)],
            "up.log",
            {"AWOOOP_METRICS_PORT": str(metrics_port)},
        )
        prom = scratch.prometheus(
            prometheus, interval, {"awooop-up": [f"127.0.0.1:{metrics_port}"]}
        )
        loop_series = 'awooop_background_loop_last_run_timestamp{job="awooop-up"}'
        relay_series = (
            'awooop_background_loop_last_run_timestamp{job="awooop-up",loop_name="relay"}'
        )
        wait_for(
            "Prometheus to scrape the relay loop's last success",
            lambda: query(prom, relay_series),
            timeout_s=120,
        )
        loops = sorted({r["metric"]["loop_name"] for r in query(prom, loop_series)})
        # a few evaluations of the healthy process: no loop alert may fire
        time.sleep(3 * interval)
        healthy = [a["labels"]["alertname"] for a in firing(prom)]
        before = sorted(n for n in healthy if n.startswith("BackgroundLoop") or n == "ProcessDown")
        stopped_at = time.time()
        up.send_signal(getattr(signal, f"SIG{args.signal}"))
        down_after: float | None = None
        stale_after: float | None = None
        stale_loops: list[str] = []
        deadline = time.monotonic() + args.timeout_s
        while time.monotonic() < deadline and stale_after is None:
            alerts = firing(prom)
            names = {a["labels"]["alertname"] for a in alerts}
            if down_after is None and "ProcessDown" in names:
                down_after = round(time.time() - stopped_at, 1)
            stale = [a for a in alerts if a["labels"]["alertname"] == "BackgroundLoopStale"]
            if any(a["labels"].get("loop_name") == "relay" for a in stale):
                stale_after = round(time.time() - stopped_at, 1)
                stale_loops = sorted(a["labels"]["loop_name"] for a in stale)
            time.sleep(1)
        # The runbook's first check for BackgroundLoopStale: `awooop loops list` names the loop's
        # last run and the process that ran it.
        listing = subprocess.run(
            [*CLI, "loops", "list", "--json"],
            env=scratch.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        relay_line = next(
            (
                json.loads(line)
                for line in listing.stdout.splitlines()
                if line.startswith("{") and json.loads(line)["loop"] == "relay"
            ),
            None,
        )
        stale_bound = (STALE_S - interval - 2, STALE_S + 2 * interval + 5)
        down_bound = (DOWN_S - interval - 2, DOWN_S + 2 * interval + 5)
        ok = (
            not before
            and stale_after is not None
            and stale_bound[0] <= stale_after <= stale_bound[1]
            and down_after is not None
            and down_bound[0] <= down_after <= down_bound[1]
        )
        return report(
            {
                "ok": ok,
                "signal": f"SIG{args.signal}",
                "scrape_and_evaluation_interval_s": interval,
                "loops_scraped": loops,
                "loop_alerts_before_the_stop": before,
                "process_down_fired_after_s": down_after,
                "process_down_bound_s": list(down_bound),
                "stale_fired_after_s": stale_after,
                "stale_bound_s": list(stale_bound),
                "stale_loops_at_first_firing": stale_loops,
                "runbook_check_loops_list_relay": relay_line,
                "other_alerts_firing": sorted(
                    {a["labels"]["alertname"] for a in firing(prom)}
                    - {"BackgroundLoopStale", "ProcessDown"}
                ),
                "logs": str(scratch.work),
            }
        )


if __name__ == "__main__":
    sys.exit(main())
