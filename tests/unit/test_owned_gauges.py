"""A gauge that only the process running one loop knows is exported by that process alone: any
other process exporting it as 0 would read as the truth to a rule over the fleet."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
from prometheus_client import generate_latest
from awooop.core import metrics
before = generate_latest().decode()
metrics.owned(metrics.LOG_PARTITION_AHEAD).set(5.0)
metrics.owned(metrics.LOG_PARTITION_AHEAD).set(6.0)
after = generate_latest().decode()
print("awooop_log_partition_ahead_seconds" in before)
print("awooop_dedupe_windows_ahead_seconds" in after)
print([l for l in after.splitlines() if l.startswith("awooop_log_partition_ahead_seconds")])
"""


def test_the_horizon_gauges_appear_only_once_set() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    ).stdout.splitlines()
    assert out == ["False", "False", "['awooop_log_partition_ahead_seconds 6.0']"], out
