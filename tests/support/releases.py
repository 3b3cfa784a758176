"""Earlier releases of the runtime as their operators install them: the source tree of a
release's commit (``git archive``) in a virtual environment of its own.

The releases are the ``[[release]]`` tables of ``migrations/released.toml`` (main's releases,
newest first). A built release is cached by commit, interpreter and the environment it
borrows (:func:`environment_key`) under ``~/.cache/awooop-releases`` (``AWOOOP_RELEASE_CACHE``
moves it), so only the first run of a checkout pays for the install. The tree is used in
place, as ``make install`` installs a checkout: ``awooop migrate`` reads the ``migrations/``
folder beside its package.

The release's environment first borrows this suite's installed dependencies: a venv without
pip whose path file puts the release's tree first, then this environment's site-packages as a
plain folder (its ``.pth`` files, this checkout's editable install among them, are not run), so
``import awooop`` is the release's own. That takes a second instead of a minute of pip on a
fresh machine; when the release needs something this environment lacks (its imports fail), it
gets a full install of its own.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.migration_history import ROOT, git

RELEASES = ROOT / "migrations" / "released.toml"
CACHE_ENV = "AWOOOP_RELEASE_CACHE"
READY = "ready"  # written last: a folder without it is a build that did not finish
INSTALL_TIMEOUT_S = 900


@dataclass(frozen=True)
class Release:
    commit: str
    newest_migration: str
    source: Path  # the release's tree: its package and its migrations/
    python: Path  # the interpreter of its own virtual environment

    @property
    def short(self) -> str:
        return self.commit[:7]


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "awooop-releases")


def released() -> list[dict[str, str]]:
    """The ``[[release]]`` tables of migrations/released.toml, newest first."""
    with RELEASES.open("rb") as f:
        return list(tomllib.load(f).get("release", []))


def previous_release() -> Release:
    """The newest release that is not this checkout's commit, built (or found in the cache).
    Fails the test, saying what to do, when the clone does not have its commit."""
    head = git("rev-parse", "HEAD").strip()
    entry = next((r for r in released() if r["commit"] != head), None)
    if entry is None:
        pytest.fail(f"{RELEASES.name} lists no release before this commit")
    require_commit(entry["commit"])
    return build(entry["commit"], entry["newest_migration"])


def require_commit(commit: str) -> None:
    if git("rev-parse", "--is-shallow-repository").strip() == "true":
        pytest.fail(
            f"the upgrade test installs release {commit[:7]} from git history: run "
            "`git fetch --unshallow` (CI clones with fetch-depth: 0)"
        )
    try:
        git("cat-file", "-e", f"{commit}^{{commit}}")
    except RuntimeError:
        pytest.fail(f"release {commit[:7]} is not in this clone: `git fetch origin main`")


def build(commit: str, newest_migration: str) -> Release:
    """The release at ``commit`` in its own virtual environment, built once per checkout's
    environment."""
    python = f"py{sys.version_info.major}{sys.version_info.minor}"
    folder = cache_root() / f"{commit}-{python}-{environment_key()}"
    release = Release(commit, newest_migration, folder / "src", folder / "venv" / "bin" / "python")
    with _locked(folder.with_name(folder.name + ".lock")):
        # A build is kept while its interpreter is there (a venv links to the base one) and
        # the environment it borrows from, if any, too.
        if not ((folder / READY).exists() and release.python.exists() and _borrowed_ok(folder)):
            shutil.rmtree(folder, ignore_errors=True)
            _extract(commit, release.source)
            _install(release)
            (folder / READY).write_text(f"{sys.version}\n")
    return release


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One build at a time per release on this machine (two test processes may need it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _extract(commit: str, into: Path) -> None:
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", commit],
        capture_output=True,
        check=True,
    ).stdout
    into.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")


BORROWED = "borrowed"  # the site-packages folder a borrowing build reads its dependencies from


def environment_key() -> str:
    """A short hash of this environment's site-packages folder, in the name of every cached
    build that borrows from it. Each checkout's environment gets builds of its own: two
    checkouts testing at once never rebuild one build under the other's running processes (a
    build made for another environment, or borrowing one since removed, is made again)."""
    ours = sysconfig.get_paths()["purelib"]
    return hashlib.sha256(ours.encode()).hexdigest()[:8]


IMPORTS = "import asyncpg, redis, msgspec, structlog, starlette, uvicorn, opentelemetry, awooop"


def _borrowed_ok(folder: Path) -> bool:
    marker = folder / BORROWED
    return not marker.exists() or Path(marker.read_text().strip()).is_dir()


def _install(release: Release) -> None:
    if _borrow(release):
        return
    _install_own(release)


def _borrow(release: Release) -> bool:
    """A venv without pip on this environment's packages; False (nothing kept) when the
    release does not import on them."""
    venv = release.python.parents[1]
    base = getattr(sys, "_base_executable", sys.executable)
    ours = sysconfig.get_paths()["purelib"]
    made = subprocess.run(
        [base, "-m", "venv", "--without-pip", str(venv)], capture_output=True, check=False
    )
    if made.returncode != 0:
        return False
    theirs = Path(
        subprocess.run(
            [
                str(release.python),
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (theirs / "awooop-release.pth").write_text(f"{release.source}\n{ours}\n")
    probe = subprocess.run(
        [str(release.python), "-c", f"{IMPORTS}; print(awooop.__file__)"],
        capture_output=True,
        text=True,
        check=False,
        cwd="/",
        env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
    )
    if probe.returncode != 0 or not probe.stdout.strip().startswith(str(release.source)):
        shutil.rmtree(venv, ignore_errors=True)
        return False
    _compile(release)
    (release.python.parents[2] / BORROWED).write_text(f"{ours}\n")
    return True


def _compile(release: Release) -> None:
    # Every process of the release compiles its modules at start where nothing cached their
    # bytecode (the Makefile's `bytecode` target says why): once, here.
    subprocess.run(
        [str(release.python), "-m", "compileall", "-q", str(release.source / "awooop"),
         str(release.source / "streams"), str(release.source / "projections")],
        capture_output=True,
        timeout=INSTALL_TIMEOUT_S,
        check=True,
    )  # fmt: skip


def _install_own(release: Release) -> None:
    venv = release.python.parents[1]
    # The interpreter this suite runs on, not its virtual environment's copy of it: the new
    # environment gets its own site-packages and nothing of ours.
    base = getattr(sys, "_base_executable", sys.executable)
    steps = [
        [base, "-m", "venv", str(venv)],
        [str(release.python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
         "-e", str(release.source)],
        # Every process of the release compiles its modules at start where nothing cached
        # their bytecode (the Makefile's `bytecode` target says why): once, here.
        [str(release.python), "-m", "compileall", "-q", str(release.source / "awooop"),
         str(release.source / "streams"), str(release.source / "projections")],
    ]  # fmt: skip
    for argv in steps:
        result = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
            check=False,
            env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"installing release {release.short}: {' '.join(argv[:4])} failed "
                f"({result.returncode}):\n{result.stderr[-3000:]}"
            )
