"""The agents benchmark (agents.py), two checkouts interleaved in one run: A (main's) and B
(this one's), alternately, so that both see the same machine's load.

    .venv/bin/python ops/bench/agents_ab.py [--rounds 3] [--shape a]
                                            [--a-code /work/main]
                                            [--a-python /work/main/.venv/bin/python]
                                            [--b-api llm_step|step] [--out FILE]
                                            [-- more agents.py flags for both sides]

Each round measures both sides, A first in odd rounds and B first in even ones; each side is
its own checkout's ``ops/bench/agents.py`` (``--shape``, and the flags after ``--``), run by its
own interpreter with the checkout as the working directory and first on the path. B's checkout
is a snapshot of this one's committed ``HEAD`` (``git archive``), so that editing the work tree
during the run changes nothing measured; ``--b-code DIR`` measures a folder as it is instead.
B's handler writes its steps with ``--b-api`` (``llm_step``, the default: the model call and
its step in one write; ``step``: ``run.step`` with ``run.llm`` inside); A's writes them as
its own ``agents.py`` does by default (``--b-api step -- --api step``: both ``step``).
Neither side writes into its checkout: each side's result goes to a scratch file (its
``report`` is replaced) and bytecode is not written (``PYTHONDONTWRITEBYTECODE``).

Prints one JSON document and keeps it in ``ops/bench/results/agents-ab-<time>.json``: per
figure, A's and B's median over the rounds and the ratio B / A of the medians (and the median
of the rounds' own ratios), for the runtime's CPU per step (and its parts: worker, relay,
Postgres backends), wall time to ideal, worker RSS per run in flight, the step overhead p50
and p99, and Postgres transactions per step; then every round's summaries.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE)]

from scratch import report  # noqa: E402

FIGURES = (
    "runtime_cpu_ms_per_step",
    "worker_cpu_ms_per_step",
    "relay_cpu_ms_per_step",
    "postgres_backends_cpu_ms_per_step",
    "wall_to_ideal",
    "rss_kb_per_in_flight",
    "step_overhead_p50_ms",
    "step_overhead_p99_ms",
    "xact_per_step",
)
CHECKS = ("not_completed", "executed_twice", "replay_clean")

# Runs one checkout's agents.py with its result kept in a scratch file (argv: the checkout,
# the file, agents.py's flags) instead of in the checkout's results folder.
DRIVER = """
import json, sys
code, out = sys.argv[1], sys.argv[2]
sys.argv = [code + "/ops/bench/agents.py", *sys.argv[3:]]
sys.path[:0] = [code, code + "/ops/bench"]
import agents

def keep(result, _name):
    with open(out, "w") as f:
        json.dump(result, f)

agents.report = keep
agents.main()
"""


def commit_of(code: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(code), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    return done.stdout.strip() or "unknown"


def snapshot(code: Path, into: Path) -> Path:
    """``code``'s committed HEAD, unpacked in ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(code), "archive", "--format=tar", "HEAD"], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def measure(python: str, code: Path, flags: list[str], scratch: Path) -> dict[str, Any]:
    """One run of ``code``'s agents.py: its result (the JSON document agents.py reports)."""
    out = scratch / f"side-{time.time_ns()}.json"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    argv = [python, "-c", DRIVER, str(code), str(out), *flags]
    done = subprocess.run(argv, cwd=code, env=env, capture_output=True, text=True)
    if done.returncode != 0 or not out.exists():
        raise RuntimeError(f"agents.py of {code} failed ({done.returncode}): {done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def summaries(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: shape["summary"] for name, shape in result["shapes"].items()}


def compare(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per shape and figure: the medians of A and B, B / A of the medians, the median of the
    rounds' ratios."""
    shapes = sorted({s for r in rounds for s in r["a"]})
    table: dict[str, Any] = {}
    for shape in shapes:
        rows: dict[str, Any] = {}
        for figure in FIGURES:
            a = [r["a"][shape].get(figure) for r in rounds]
            b = [r["b"][shape].get(figure) for r in rounds]
            if any(v is None for v in a + b):
                rows[figure] = {"a": a, "b": b, "note": "missing in some round"}
                continue
            ma, mb = statistics.median(a), statistics.median(b)
            paired = [y / x for x, y in zip(a, b, strict=True) if x]
            rows[figure] = {
                "a_median": round(ma, 4),
                "b_median": round(mb, 4),
                "b_over_a": round(mb / ma, 3) if ma else None,
                "b_over_a_paired_median": round(statistics.median(paired), 3) if paired else None,
                "a": a,
                "b": b,
            }
        rows["checks"] = {
            side: [{k: r[side][shape].get(k) for k in CHECKS} for r in rounds] for side in "ab"
        }
        table[shape] = rows
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="A and B runs each")
    parser.add_argument("--shape", default="a", help="agents.py's --shape (a, b or all)")
    parser.add_argument("--a-code", default="/work/main", help="A's checkout (read only)")
    parser.add_argument("--a-python", default=None, help="A's interpreter (its .venv's)")
    parser.add_argument("--b-code", default=None, help="B's folder as it is (no snapshot)")
    parser.add_argument("--b-api", default="llm_step", choices=("llm_step", "step"))
    parser.add_argument("--out", default=None, help="also write the JSON here")
    parser.add_argument("flags", nargs="*", help="after --: agents.py flags for both sides")
    args = parser.parse_args()
    a_code = Path(args.a_code).resolve()
    a_python = args.a_python or str(a_code / ".venv" / "bin" / "python")
    flags = ["--shape", args.shape, *args.flags]
    a_commit = commit_of(a_code)  # A's checkout may move during the run: both ends recorded
    b_commit = commit_of(Path(args.b_code) if args.b_code else ROOT)  # what the snapshot holds
    with tempfile.TemporaryDirectory(prefix="awooop-agents-ab-") as tmp:
        scratch = Path(tmp)
        b_code = Path(args.b_code).resolve() if args.b_code else snapshot(ROOT, scratch / "b")
        sides = {
            "a": (a_python, a_code, flags),
            "b": (sys.executable, b_code, [*flags, "--api", args.b_api]),
        }
        rounds: list[dict[str, Any]] = []
        for i in range(args.rounds):
            order = "ab" if i % 2 == 0 else "ba"
            done: dict[str, Any] = {"order": order}
            for side in order:
                python, code, side_flags = sides[side]
                done[side] = summaries(measure(python, code, side_flags, scratch))
                print(f"round {i + 1} {side}: {json.dumps(done[side])}", file=sys.stderr)
            rounds.append(done)
    result = {
        "benchmark": "agents-ab",
        "command": " ".join(["ops/bench/agents_ab.py", *sys.argv[1:]]),
        "machine": {"cpus": os.cpu_count(), "load_avg_after": os.getloadavg()},
        "a": {
            "code": str(a_code),
            "commit": a_commit,
            "commit_at_end": commit_of(a_code),
            "python": a_python,
        },
        "b": {"code": str(args.b_code or ROOT), "commit": b_commit, "api": args.b_api},
        "flags": flags,
        "compare": compare(rounds),
        "rounds": rounds,
    }
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    report(result, "agents-ab")


if __name__ == "__main__":
    main()
