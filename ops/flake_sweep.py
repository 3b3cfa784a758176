"""Run test files many times each, one file at a time, and record every failure: the sweep
that finds flaky tests.

    .venv/bin/python ops/flake_sweep.py [PATH ...] [--times 20] [--busy] [--out FILE]
                                        [--resume FILE] [--pytest-args "-x"]

PATH: test files or folders (default ``tests``). Each file runs ``--times`` times in a row,
alone (``pytest -q -n 0 -rfE FILE``: no other test shares the machine's services with it),
before the next file. ``--busy`` keeps one CPU burner per core running during the sweep
(both cores busy, as a loaded CI machine is). The JSON written to ``--out`` (default
``ops/bench/results/flakes-<time>.json``) after each run holds, per file, how many runs
passed and failed, their median seconds, and for each failed run the failing test ids and the
last lines of its output. ``--resume FILE`` continues a sweep that stopped: the files of FILE
that already have ``--times`` runs are skipped, and the others continue from where they were
(the same options must be given); the entries of FILE's other files are kept as they are.
Exit status 1 when any run of the files asked for failed.

Reading the result: a file with any failed run is a flaky test (or a broken one, when every
run failed) until its cause is found; the failed runs' output is where to start.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FAILED = re.compile(r"^(FAILED|ERROR) (\S+)", re.MULTILINE)
TAIL_LINES = 40


def test_files(paths: list[str]) -> list[str]:
    """The test files under ``paths`` (files as given), sorted, relative to the checkout."""
    found: set[str] = set()
    for raw in paths:
        path = (ROOT / raw).resolve()
        if path.is_file():
            found.add(str(path.relative_to(ROOT)))
        else:
            found.update(str(p.relative_to(ROOT)) for p in path.rglob("test_*.py"))
    return sorted(found)


def failed_tests(output: str) -> list[str]:
    """Pure: the test ids pytest's short summary (``-rfE``) names as failed or errored."""
    return sorted({m.group(2) for m in FAILED.finditer(output)})


def burn() -> None:  # pragma: no cover - runs in a child process until killed
    while True:
        pass


def run_once(path: str, extra: list[str]) -> dict[str, Any]:
    command = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-rfE", "-p", "no:cacheprovider"]
    started = time.monotonic()
    done = subprocess.run(
        [*command, *extra, path], cwd=ROOT, capture_output=True, text=True, check=False
    )
    output = done.stdout + done.stderr
    return {
        "rc": done.returncode,
        "seconds": round(time.monotonic() - started, 2),
        "failed": failed_tests(output) if done.returncode else [],
        "tail": output.splitlines()[-TAIL_LINES:] if done.returncode else [],
    }


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    bad = [r for r in runs if r["rc"] != 0]
    return {
        "runs": len(runs),
        "passed": len(runs) - len(bad),
        "failed": len(bad),
        "median_s": statistics.median(r["seconds"] for r in runs) if runs else None,
        "failures": bad,
    }


def resumed(
    old: dict[str, Any], files: list[str]
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any]]:
    """Pure: from an earlier sweep's JSON, the runs already made of each of ``files`` (the
    sweep continues them) and the entries of every other file it holds, carried over as they
    are: resuming with some files never drops what the sweep found for the others."""
    previous = {f: e["all_runs"] for f, e in old["files"].items() if f in files}
    carried = {f: e for f, e in old["files"].items() if f not in files}
    return previous, carried


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="*", default=["tests"])
    parser.add_argument("--times", type=int, default=20)
    parser.add_argument("--busy", action="store_true", help="one CPU burner per core")
    parser.add_argument("--out", default=None)
    parser.add_argument("--resume", default=None, help="a sweep's JSON to continue")
    parser.add_argument("--pytest-args", default="", help="more pytest arguments")
    args = parser.parse_args()
    stamp = time.strftime("%Y-%m-%dT%H%M", time.gmtime())
    out = Path(args.out or ROOT / "ops/bench/results" / f"flakes-{stamp}.json")
    files = test_files(args.paths)
    previous: dict[str, list[dict[str, Any]]] = {}
    carried: dict[str, Any] = {}
    if args.resume:
        previous, carried = resumed(json.loads(Path(args.resume).read_text()), files)
    burners = []
    if args.busy:
        burners = [
            multiprocessing.Process(target=burn, daemon=True) for _ in range(os.cpu_count() or 1)
        ]
        for burner in burners:
            burner.start()
    result: dict[str, Any] = {
        "sweep": "flakes",
        "command": " ".join(sys.argv),
        "config": {"times": args.times, "busy": args.busy, "cpus": os.cpu_count()},
        "files": dict(carried),
    }
    try:
        for path in files:
            runs = list(previous.get(path, []))
            while len(runs) < args.times:
                runs.append(run_once(path, args.pytest_args.split()))
                result["files"][path] = {**summary(runs), "all_runs": runs}
                out.write_text(json.dumps(result, indent=1) + "\n")
            result["files"][path] = {**summary(runs), "all_runs": runs}
            state = "ok" if not summary(runs)["failed"] else "FLAKY"
            print(f"{state:5} {path}: {summary(runs)['passed']}/{len(runs)}", flush=True)
    finally:
        for burner in burners:
            burner.kill()
    flaky = {f: result["files"][f]["failed"] for f in files if result["files"][f]["failed"]}
    result["flaky"] = flaky
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({"out": str(out), "files": len(files), "flaky": flaky}))
    return 1 if flaky else 0


if __name__ == "__main__":
    sys.exit(main())
