"""``awooop worker --handler module:function`` (the installed script, no PYTHONPATH) finds a
handler module in the folder it starts in, as ``python -m`` would; elsewhere it says what to do
(E-HANDLER-002 naming the current directory and ``sys.path``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from awooop.core.config import Settings
from awooop.core.db import Database
from tests.support.runs import create_runs, load
from tests.support.workers import worker_env

P = "proj-handler-path"
SCRIPT = Path(sys.executable).parent / "awooop"
HANDLER = """
async def handle(run):
    return {"handled_by": __file__}
"""


def worker(settings: Settings, cwd: Path, spec: str) -> subprocess.CompletedProcess[str]:
    env = worker_env(settings)
    del env["PYTHONPATH"]  # only what the script itself puts on sys.path
    return subprocess.run(
        [str(SCRIPT), "worker", "--handler", spec, "--burst", "--no-streams"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.connections(13)
async def test_a_handler_module_in_the_current_directory_is_found(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    (tmp_path / "triage.py").write_text(HANDLER)
    [run_id] = await create_runs(db, P, payload={})
    done = worker(settings, tmp_path, "triage:handle")
    assert done.returncode == 0, done.stderr
    assert "ran 1 attempt(s)" in done.stdout
    state = await load(db, P, run_id)
    assert state.status == "COMPLETED"
    assert state.result == {"handled_by": str(tmp_path / "triage.py")}


async def test_a_handler_module_elsewhere_is_refused_with_what_to_do(
    settings: Settings, tmp_path: Path
) -> None:
    (tmp_path / "elsewhere").mkdir()
    refused = worker(settings, tmp_path / "elsewhere", "triage:handle")
    assert refused.returncode == 1
    [line] = refused.stderr.strip().splitlines()  # one line, no traceback
    assert line.startswith("error E-HANDLER-002: handler module 'triage' cannot be imported")
    assert "No module named 'triage'" in line
    assert "in the folder that holds triage.py" in line and "PYTHONPATH" in line
    assert f"Current directory: {tmp_path / 'elsewhere'}" in line
    assert "sys.path starts with [" in line
    # A module that is found but fails to import one of its own imports: that error, no hint.
    (tmp_path / "broken.py").write_text("import no_such_dependency\n")
    broken = worker(settings, tmp_path, "broken:handle")
    assert broken.returncode == 1
    assert "No module named 'no_such_dependency'" in broken.stderr
    assert "PYTHONPATH" not in broken.stderr
