"""A child ``awooop`` process runs the code its parent runs (awooop/core/process.py): the
working folder goes on its import path only where the parent imported awooop from it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from awooop.core.process import cli_command
from tests.support.scripts import ROOT


def test_a_child_started_in_another_folder_leaves_that_folder_off_its_import_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli_command() == [sys.executable, "-P", "-m", "awooop.cli"]
    assert cli_command("/opt/python") == ["/opt/python", "-P", "-m", "awooop.cli"]


def test_a_child_started_in_the_source_tree_imports_from_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(ROOT)
    assert cli_command() == [sys.executable, "-m", "awooop.cli"]
