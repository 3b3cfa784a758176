"""Every ``awooop`` command whose output goes into a pipe its reader closed early
(``awooop runs show ... | head -1``) stops quietly: no traceback, exit status 141 (128 +
SIGPIPE, what a shell reports for ``git log | head -1``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from awooop.cli import CLOSED_PIPE
from awooop.core.config import Settings
from awooop.core.db import Database
from tests.support.runs import create_runs
from tests.support.workers import ROOT, worker_env

P = "proj-pipe"
SCRIPT = Path(sys.executable).parent / "awooop"


async def test_runs_show_into_head_exits_quietly(db: Database, settings: Settings) -> None:
    # A state table far bigger than a pipe's buffer: head leaves before it is all written.
    [run_id] = await create_runs(db, P, payload={"text": "x" * 400_000})
    shown = into_head(settings, f"runs show {P} {run_id}")
    [line] = shown.stdout.splitlines()
    assert line.startswith("blocked_on: ")
    assert shown.stderr == f"{CLOSED_PIPE}\n"  # no traceback, no "Exception ignored"


def into_head(settings: Settings, command: str) -> subprocess.CompletedProcess[str]:
    """``awooop COMMAND | head -1``; the command's exit status is the last line of stderr."""
    pipeline = f'"$1" {command} | head -1; echo "${{PIPESTATUS[0]}}" >&2'
    return subprocess.run(
        ["bash", "-c", pipeline, "bash", str(SCRIPT)],
        env=worker_env(settings),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def into_closed_pipe(settings: Settings, argv: list[str]) -> tuple[int, str]:
    """``awooop ARGV`` whose stdout's reader closes its end before the command writes a byte
    (every write meets EPIPE): its exit status and stderr."""
    proc = subprocess.Popen(
        [str(SCRIPT), *argv],
        env=worker_env(settings),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


@pytest.mark.parametrize(
    "argv",
    [
        ["runs", "list", "--project", P],
        ["runs", "list", "--project", P, "--json"],
        ["runs", "show", P, "00000000-0000-0000-0000-000000000000", "--json"],  # an error: 1
    ],
)
async def test_any_command_into_a_closed_pipe_exits_quietly(
    db: Database, settings: Settings, argv: list[str]
) -> None:
    await create_runs(db, P, 3, payload={})
    returncode, err = into_closed_pipe(settings, argv)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    if argv[1] == "show":
        assert (returncode, err.split(":")[0]) == (1, "error E-RUN-003"), err
    else:
        assert (returncode, err) == (CLOSED_PIPE, "")
