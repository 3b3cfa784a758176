"""A wheel of this checkout installed in a fresh virtual environment (tests/support/wheels.py)
has everything ``awooop migrate`` needs: it migrates a new database from the migrations it
carries as package data, and ``awooop --help`` runs. Its only top-level package is ``awooop``:
a service with packages of its own named ``streams`` and ``projections`` keeps them."""

from __future__ import annotations

import subprocess
import sysconfig
import uuid
from pathlib import Path

import asyncpg

from awooop.core.migrate import discover
from tests.support.databases import drop_database, with_database
from tests.support.wheels import clean_env, installed_wheel, package_file


def awooop(bin_dir: Path, cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bin_dir / "awooop"), *args],
        cwd=cwd,
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def test_an_installed_wheel_migrates_a_new_database(
    pg_server_url: str, tmp_path: Path
) -> None:
    bin_dir = installed_wheel()
    assert package_file(bin_dir, tmp_path).startswith(str(bin_dir.parent))  # not the checkout
    helped = awooop(bin_dir, tmp_path, "--help")
    assert helped.returncode == 0 and helped.stdout.startswith("usage: awooop"), helped.stderr
    name = f"awooop_test_{uuid.uuid4().hex[:12]}"
    url = with_database(pg_server_url, name)
    try:
        migrated = awooop(bin_dir, tmp_path, "migrate", AWOOOP_DATABASE_URL=url)
        assert migrated.returncode == 0, migrated.stderr
        conn = await asyncpg.connect(url)
        try:
            applied = await conn.fetch("SELECT name FROM awooop_schema_migrations ORDER BY name")
        finally:
            await conn.close()
        assert [r["name"] for r in applied] == [m.name for m in discover()]
        again = awooop(bin_dir, tmp_path, "migrate", "--check", AWOOOP_DATABASE_URL=url)
        assert again.returncode == 0, again.stderr  # nothing pending: the released checksums
    finally:
        await drop_database(pg_server_url, name)


def test_the_demo_of_an_installed_wheel_does_not_need_testcontainers(tmp_path: Path) -> None:
    """testcontainers is a dev dependency: where a Docker engine answers, an install from the
    wheel still takes the embedded servers instead of failing to import it."""
    bin_dir = installed_wheel()
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "docker").write_text("#!/bin/sh\nexit 0\n")  # `docker info` answers
    (fake / "docker").chmod(0o755)
    # The wheel's environment borrows this suite's packages (tests/support/wheels.py), dev ones
    # too: once the provisioning module is imported, the probe drops that folder from its path,
    # so that testcontainers is missing as it is from an operator's install.
    borrowed = sysconfig.get_paths()["purelib"]
    probe = subprocess.run(
        [str(bin_dir / "python"), "-c", "from awooop.demo import provision as p; "
         f"import shutil, sys; sys.path[:] = [p for p in sys.path if p != {borrowed!r}]; "
         "print(shutil.which('docker'), p._docker_engine())"],
        cwd=tmp_path,
        env=clean_env(PATH=f"{fake}:/usr/bin:/bin"),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )  # fmt: skip
    assert probe.stdout.split() == [str(fake / "docker"), "False"]


def test_an_installed_wheel_leaves_a_services_streams_and_projections_packages_alone(
    tmp_path: Path,
) -> None:
    """Run from a service's folder, on the service's path: awooop's commands and producer import
    awooop.streams and awooop.projections, and ``import streams`` is the service's."""
    bin_dir = installed_wheel()
    for name in ("streams", "projections"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("WHOSE = 'service'\n")
    for command in (["--help"], ["replay", "--help"], ["projector", "--help"]):
        helped = awooop(bin_dir, tmp_path, *command, PYTHONPATH=str(tmp_path))
        assert helped.returncode == 0 and helped.stdout.startswith("usage: awooop"), helped.stderr
    probe = subprocess.run(
        [str(bin_dir / "python"), "-c", "import awooop.producer, awooop.commands.replay, "
         "streams, projections; print(streams.WHOSE, projections.WHOSE, streams.__file__)"],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split() == ["service", "service", str(tmp_path / "streams/__init__.py")]
