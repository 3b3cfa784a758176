"""ops/flake_sweep.py: which tests a run's output names as failed, which files a sweep runs,
and a failing file run for real (a throwaway test that fails every other run)."""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.scripts import ROOT, load_script


@pytest.fixture(scope="module")
def sweep() -> ModuleType:
    return load_script("ops/flake_sweep.py", "flake_sweep")


def test_the_failed_tests_are_read_from_the_short_summary(sweep: ModuleType) -> None:
    output = (
        "..F.E\n"
        "=========================== short test summary info ============================\n"
        "FAILED tests/unit/test_a.py::test_one - AssertionError: assert 1 == 2\n"
        "ERROR tests/unit/test_b.py::test_two - RuntimeError\n"
        "FAILED tests/unit/test_a.py::test_one - AssertionError: again\n"
        "1 failed, 1 error, 3 passed in 0.12s\n"
    )
    assert sweep.failed_tests(output) == [
        "tests/unit/test_a.py::test_one",
        "tests/unit/test_b.py::test_two",
    ]
    assert sweep.failed_tests("3 passed in 0.1s\n") == []


def test_the_files_of_a_folder_and_a_file_given_alone(sweep: ModuleType) -> None:
    files = sweep.test_files(["tests/unit", "tests/integration/test_local_timers.py"])
    assert "tests/unit/test_flake_sweep.py" in files
    assert "tests/integration/test_local_timers.py" in files
    assert not any(f.startswith("tests/acceptance/") for f in files)
    assert files == sorted(files) and len(files) == len(set(files))


def test_a_run_of_a_failing_file_records_the_failed_test(sweep: ModuleType, tmp_path: Path) -> None:
    # The throwaway file lives in tmp_path, its own rootdir: a file written into tests/ would
    # be seen, half there, by the tests that walk the source tree in other xdist workers
    # (test_lint_floors read one that was already gone, on a loaded machine).
    flaky = tmp_path / "test_zz_sweep.py"
    flaky.write_text(
        "def test_fails() -> None:\n    assert 1 == 2\n\n\ndef test_ok() -> None:\n    pass\n"
    )
    result = sweep.run_once(str(flaky), ["--rootdir", str(tmp_path)])
    assert result["rc"] == 1
    # The summary names it from where the sweep runs pytest (the checkout).
    assert result["failed"] == [f"{os.path.relpath(flaky, ROOT)}::test_fails"]
    assert any("1 failed, 1 passed" in line for line in result["tail"])
    assert sweep.summary([result, {**result, "rc": 0}])["failed"] == 1


def test_a_resumed_sweep_continues_its_files_and_keeps_the_others(sweep: ModuleType) -> None:
    run = {"rc": 0, "seconds": 1.0, "failed": [], "tail": []}
    old = {
        "files": {
            "tests/a.py": {"runs": 20, "failed": 0, "all_runs": [run] * 20},
            "tests/b.py": {"runs": 3, "failed": 0, "all_runs": [run] * 3},
            "tests/c.py (before abc1234)": {"runs": 20, "failed": 1, "all_runs": [run] * 20},
        }
    }
    previous, carried = sweep.resumed(old, ["tests/b.py", "tests/d.py"])
    assert previous == {"tests/b.py": [run] * 3}  # d.py starts from nothing
    assert carried == {k: old["files"][k] for k in ("tests/a.py", "tests/c.py (before abc1234)")}
