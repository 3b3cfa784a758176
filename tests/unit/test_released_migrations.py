"""Released migrations never change in a way a database could tell.

Every version of a migration file that main shipped (its first-parent history) is a version
some database recorded. Each must be the current file, or be listed in migrations/released.toml:
as differing in comments and whitespace only (checked here), or as a body change with the
migration that repairs it. Needs git and the full history (see tests/support/migration_history).
"""

from __future__ import annotations

import pytest

from awooop.core.migrate import MIGRATIONS_DIR, discover
from awooop.core.migration_checksums import (
    ReleasedVersion,
    load_released,
    normalise_sql,
    raw_checksum,
)
from tests.support.migration_history import ReleasedFile, main_ref, released_versions


@pytest.fixture(scope="module")
def shipped() -> dict[str, list[ReleasedFile]]:
    return released_versions(main_ref())


@pytest.fixture(scope="module")
def listed() -> list[ReleasedVersion]:
    return load_released(MIGRATIONS_DIR)


def entry_for(version: ReleasedFile, current: str) -> str:
    kind = "comments" if normalise_sql(version.text) == normalise_sql(current) else "body"
    return (
        f'[[version]]\nfile = "{version.name}"\nchecksum = "{raw_checksum(version.text)}"\n'
        f'release = "{version.commit[:7]}"\nkind = "{kind}"\nwhy = "..."'
        + ('\nrepaired_by = "NNNN_....sql"' if kind == "body" else "")
    )


def test_every_shipped_version_is_the_current_file_or_listed(
    shipped: dict[str, list[ReleasedFile]], listed: list[ReleasedVersion]
) -> None:
    current = {m.name: m.sql for m in discover()}
    accepted = {(v.file, v.checksum) for v in listed}
    removed = sorted(set(shipped) - set(current))
    assert not removed, f"released migrations are never removed: {removed}"
    missing = [
        entry_for(version, current[name])
        for name, versions in shipped.items()
        for version in versions
        if raw_checksum(version.text) != raw_checksum(current[name])
        and (name, raw_checksum(version.text)) not in accepted
    ]
    assert not missing, (
        "a released migration file changed; restore it and put the change in a new migration, "
        "or (comments only) list the released version in migrations/released.toml:\n\n"
        + "\n\n".join(missing)
    )


def test_every_listed_version_was_shipped_and_is_what_it_says(
    shipped: dict[str, list[ReleasedFile]], listed: list[ReleasedVersion]
) -> None:
    current = {m.name: m.sql for m in discover()}
    assert listed, "migrations/released.toml lists the versions main changed after shipping"
    for entry in listed:
        versions = {raw_checksum(v.text): v for v in shipped.get(entry.file, [])}
        version = versions.get(entry.checksum)
        assert version is not None, f"{entry.file} {entry.checksum[:12]} was never on main"
        assert version.commit.startswith(entry.release), (entry, version.commit)
        same_statements = normalise_sql(version.text) == normalise_sql(current[entry.file])
        assert same_statements == (entry.kind == "comments"), (
            f"{entry.file} at {entry.release}: kind {entry.kind!r}, but its normalised text "
            f"{'equals' if same_statements else 'differs from'} the current file's"
        )
        if entry.kind == "body":
            assert entry.repaired_by in current, entry
            assert entry.repaired_by > entry.file, entry
            assert entry.why.strip(), entry
