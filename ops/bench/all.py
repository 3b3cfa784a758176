"""Run every benchmark, one after another, and write one JSON file plus a short table.

    python ops/bench/all.py [--only ingest,relay,...] [--out ops/bench/results/latest.json]

(``make bench`` runs it.) Each benchmark is a script in this folder that prints one JSON
document on stdout; they run sequentially so that they do not compete for the two cores.
The file records the machine (CPU count, model, load before the run) beside the figures.
``growth`` and ``online_migration`` run small here (``ARGUMENTS``: 250k events); their full
runs are by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BENCHMARKS = (
    "ingest",
    "relay",
    "worker",
    "cost",
    "producer_pool",
    "producer_drivers",
    "scheduler",
    "fairness",
    "agents",
    "sleeps",
    "revisions",
    "replay",
    "service_projections",
    "loops",
    "console",
    "growth",
    "online_migration",
)
# Arguments of the benchmarks that ``make bench`` runs small: growth.py's full run (0, 10M and
# 50M events) takes an hour and 60 GB; this variant (0 and 250k events) takes under a minute.
GROWTH_OUT = Path(tempfile.gettempdir()) / "awooop-bench-growth.json"
ARGUMENTS: dict[str, list[str]] = {
    "growth": ["--sizes", "0,250k", "--rounds", "4", "--ops", "100", "--out", str(GROWTH_OUT)],
    # Its full run (10M events, the default) takes about half an hour; 250k events, a minute.
    "online_migration": ["--events", "250000", "--baseline-s", "3"],
    # Four modes, 3 rounds of 1,000 runs: about a minute (its default: 5 rounds of 2,000).
    "producer_pool": ["--runs", "1000", "--rounds", "3"],
}


def machine() -> dict[str, Any]:
    model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "python": platform.python_version(),
        "load_before": os.getloadavg(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def last_json(text: str) -> Any:
    """The JSON document a benchmark printed (the last line that parses, or the whole text)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    start = text.find("{")
    while start != -1:
        try:
            return json.loads(text[start:])
        except json.JSONDecodeError:
            start = text.find("{", start + 1)
    raise ValueError("no JSON document in the output")


def run(name: str) -> dict[str, Any]:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, str(HERE / f"{name}.py"), *ARGUMENTS.get(name, [])],
        capture_output=True,
        text=True,
        check=False,
        timeout=3600,
    )
    entry: dict[str, Any] = {
        "seconds": round(time.monotonic() - started, 1),
        "exit_code": result.returncode,
    }
    try:
        entry["result"] = last_json(result.stdout)
    except ValueError:
        entry["error"] = (result.stderr or result.stdout).strip()[-2000:]
    return entry


def flatten(value: Any, prefix: str = "") -> list[tuple[str, float]]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [(prefix, float(value))]
    if isinstance(value, dict):
        out: list[tuple[str, float]] = []
        for key, item in value.items():
            out.extend(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(value, list):
        out = []
        for index, item in enumerate(value):
            out.extend(flatten(item, f"{prefix}[{index}]"))
        return out
    return []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(BENCHMARKS))
    parser.add_argument("--out", default=str(HERE / "results" / "latest.json"))
    args = parser.parse_args()
    report: dict[str, Any] = {"machine": machine(), "benchmarks": {}}
    for name in [n for n in args.only.split(",") if n]:
        print(f"== {name}", file=sys.stderr, flush=True)
        report["benchmarks"][name] = run(name)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    for name, entry in report["benchmarks"].items():
        print(f"\n{name}  ({entry['seconds']} s, exit {entry['exit_code']})")
        if "error" in entry:
            print(f"  error: {entry['error'].splitlines()[-1] if entry['error'] else '?'}")
            continue
        for key, number in flatten(entry["result"])[:14]:
            print(f"  {key:<60} {number:,.3f}")
    print(f"\nwritten to {out}")
    return 0 if all(e["exit_code"] == 0 for e in report["benchmarks"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
