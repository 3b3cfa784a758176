"""The migration files as main shipped them, read from git history.

Every commit on main's first-parent history is a release a database may have been migrated
with; the tests hold the current files and migrations/released.toml against those versions.
They need a clone with full history and a ``main`` (or ``origin/main``) branch: a shallow
clone or a bare copy of the files makes them fail with what to do, never pass by skipping.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAIN_REFS = ("main", "origin/main")


def git(*args: str) -> str:
    result = subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


def main_ref() -> str:
    """The commit of main this checkout is built on: its first-parent history is the list of
    releases. Fails the test with what it needs when the clone cannot tell."""
    try:
        shallow = git("rev-parse", "--is-shallow-repository").strip() == "true"
    except (RuntimeError, FileNotFoundError) as exc:
        pytest.fail(f"the migration history needs git and a clone of the repository: {exc}")
    if shallow:
        pytest.fail(
            "the migration history needs the full git history: run `git fetch --unshallow` "
            "(CI clones with fetch-depth: 0)"
        )
    for ref in MAIN_REFS:
        try:
            git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        except RuntimeError:
            continue
        # What this checkout is built on: a branch made before main moved on is held against
        # the releases it knows, not against migrations main added since.
        return git("merge-base", "HEAD", ref).strip()
    pytest.fail(f"the migration history needs a branch named one of {MAIN_REFS}: `git fetch`")


def release_commits(ref: str) -> list[str]:
    """Commits on ``ref``'s first-parent history that changed migrations/, oldest first."""
    out = git("log", "--first-parent", "--reverse", "--format=%H", ref, "--", "migrations")
    return out.split()


def migration_blobs(commit: str) -> dict[str, str]:
    """File name -> blob id of the .sql migrations at ``commit``."""
    blobs: dict[str, str] = {}
    for line in git("ls-tree", commit, "migrations/").splitlines():
        meta, path = line.split("\t")
        name = path.rsplit("/", 1)[-1]
        if name.endswith(".sql"):
            blobs[name] = meta.split()[2]
    return blobs


def blob_text(blob: str) -> str:
    # Path.read_text (what every release read the files with) turns \r\n into \n.
    return git("cat-file", "blob", blob).replace("\r\n", "\n")


@dataclass(frozen=True)
class ReleasedFile:
    name: str
    commit: str  # the first commit on main that shipped this version
    text: str


def released_versions(ref: str) -> dict[str, list[ReleasedFile]]:
    """Each migration file's distinct versions on main, in the order they shipped."""
    versions: dict[str, list[ReleasedFile]] = {}
    seen: set[tuple[str, str]] = set()
    for commit in release_commits(ref):
        for name, blob in migration_blobs(commit).items():
            if (name, blob) in seen:
                continue
            seen.add((name, blob))
            versions.setdefault(name, []).append(ReleasedFile(name, commit, blob_text(blob)))
    return versions


# The module that made `awooop migrate` record normalised checksums: releases that have it
# recorded their migrations as the current code does.
NORMALISING_MIGRATOR = "awooop/core/migration_checksums.py"


def records_normalised(commit: str) -> bool:
    """Whether the release at ``commit`` recorded normalised checksums (the current format)."""
    try:
        git("cat-file", "-e", f"{commit}:{NORMALISING_MIGRATOR}")
    except RuntimeError:
        return False
    return True


def materialise(commit: str, folder: Path) -> Path:
    """Write the migration files of ``commit`` into ``folder``; return it."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, blob in migration_blobs(commit).items():
        (folder / name).write_text(blob_text(blob))
    return folder
