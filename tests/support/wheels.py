"""This checkout as its operators install it from a wheel: ``pip wheel`` of the tree, installed
in a virtual environment of its own (not the checkout: ``import awooop`` is the wheel's).

The environment borrows its dependencies from this suite's environment, as the releases under
test do (tests/support/releases.py): a venv without pip whose path file adds this suite's
site-packages as a plain folder after its own (so none of that folder's ``.pth`` files run, and
this checkout's editable install is not seen); the wheel goes in with ``--no-deps``. What the
wheel must carry itself (its packages, its SQL, its migrations) is tested, not pip's
resolution of public packages, which would cost a minute of pip on each fresh machine.

Cached under ``~/.cache/awooop-wheels`` (``AWOOOP_WHEEL_CACHE`` moves it), one environment per
checkout's environment (:func:`tests.support.releases.environment_key`): the wheel is built
and put in again only when a packaged file changed (a hash of the packages' files, the
migrations and ``pyproject.toml``), in about 10 s.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from tests.support.releases import BORROWED, READY, _locked, environment_key
from tests.support.scripts import ROOT

CACHE_ENV = "AWOOOP_WHEEL_CACHE"
PACKAGED = ("awooop", "streams", "projections", "migrations")
TIMEOUT_S = 900
PURELIB = "import sysconfig; print(sysconfig.get_paths()['purelib'])"


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "awooop-wheels")


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a process of the installed wheel: nothing points at the checkout."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV") and not k.startswith("AWOOOP_")
    }
    return {**env, **extra}


def package_file(bin_dir: Path, cwd: Path) -> str:
    """Where ``import awooop`` finds the package in that environment, run in ``cwd``."""
    found = subprocess.run(
        [str(bin_dir / "python"), "-c", "import awooop; print(awooop.__file__)"],
        cwd=cwd,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return found.stdout.strip()


def sources_hash() -> str:
    """Pure but for reading files: a hash of every file the wheel is built from."""
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes())
    for top in PACKAGED:
        for path in sorted((ROOT / top).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def installed_wheel() -> Path:
    """The ``bin`` folder of a virtual environment holding this checkout's wheel."""
    version = f"py{sys.version_info.major}{sys.version_info.minor}"
    deps = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]
    venv = cache_root() / f"venv-{deps}-{version}-{environment_key()}"
    with _locked(venv.with_name(venv.name + ".lock")):
        if not (
            (venv / READY).exists() and (venv / "bin" / "python").exists() and _borrows_ours(venv)
        ):
            shutil.rmtree(venv, ignore_errors=True)
            base = getattr(sys, "_base_executable", sys.executable)
            _run([base, "-m", "venv", "--without-pip", str(venv)])
            purelib = _run([str(venv / "bin" / "python"), "-c", PURELIB]).strip()
            ours = sysconfig.get_paths()["purelib"]
            (Path(purelib) / "awooop-dependencies.pth").write_text(f"{ours}\n")
            (venv / BORROWED).write_text(f"{ours}\n")
            (venv / READY).write_text(f"{sys.version}\n")
        if (venv / "installed").exists() and (venv / "installed").read_text() == sources_hash():
            return venv / "bin"
        shutil.rmtree(venv / "dist", ignore_errors=True)
        wheel = _build(venv / "dist")
        pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install"]
        _run([*pip, "-q", "--no-deps", "--force-reinstall", str(wheel)])
        (venv / "installed").write_text(sources_hash())
    return venv / "bin"


def _borrows_ours(venv: Path) -> bool:
    """Whether the cached environment borrows this suite's site-packages (one made for another
    checkout's environment is made again: what its probe takes away must be what it borrows)."""
    marker = venv / BORROWED
    ours = sysconfig.get_paths()["purelib"]
    return marker.exists() and marker.read_text().strip() == ours


def _build(into: Path) -> Path:
    # setuptools builds in the tree's build/ and never removes from it: a module deleted from
    # the sources would still be in the wheel, and the tests would pass on what a clean clone's
    # wheel no longer carries.
    shutil.rmtree(ROOT / "build", ignore_errors=True)
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(into), str(ROOT)])
    [wheel] = into.glob("awooop-*.whl")
    return wheel


def _run(argv: list[str]) -> str:
    result = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
        cwd="/",
        env=clean_env(),
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv[:5])} failed ({result.returncode}):\n{result.stderr[-3000:]}"
        )
    return result.stdout
