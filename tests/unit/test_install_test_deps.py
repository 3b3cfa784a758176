"""ops/install-test-deps.sh (the first step of ``make test`` and of .ci/run) on a machine that
lacks everything: it names each missing piece and the one command that installs it, installs
nothing, and fails."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "ops" / "install-test-deps.sh"
MISSING = ("pg_auto_failover", "iproute2 (ip, tc)", "chromium", "promtool and prometheus")


def check(path: Path) -> subprocess.CompletedProcess[str]:
    """The script's check mode with nothing on PATH but ``path`` (bash by its full path)."""
    return subprocess.run(
        ["/bin/bash", str(SCRIPT), "--check"],
        env={"PATH": str(path)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_it_names_what_is_missing_and_the_command_and_installs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "apt-get-ran"
    apt_get = tmp_path / "apt-get"
    apt_get.write_text(f"#!/bin/sh\ntouch {marker}\n")
    apt_get.chmod(0o755)
    result = check(tmp_path)
    assert result.returncode == 1, result.stderr
    for what in MISSING:
        assert what in result.stderr
    assert "sudo ops/install-test-deps.sh" in result.stderr
    assert not marker.exists()


def test_without_apt_it_says_to_use_the_systems_package_manager(tmp_path: Path) -> None:
    result = check(tmp_path)
    assert result.returncode == 1
    assert "no apt-get here" in result.stderr and "chromium" in result.stderr
