"""Where ``awooop migrate`` finds its files: the package's ``awooop/migrations``, which in a
checkout links to the repository's ``migrations/`` (their one source) and in a wheel is package
data (tests/acceptance/test_wheel_install.py); a missing folder is a coded error."""

from __future__ import annotations

from pathlib import Path

import pytest

from awooop.core.errors import MigrationsNotFoundError
from awooop.core.migrate import MIGRATIONS_DIR, discover

ROOT = Path(__file__).resolve().parents[2]


def test_the_package_link_is_the_repositorys_migrations_folder() -> None:
    link = ROOT / "awooop" / "migrations"
    assert link.is_symlink() and link.readlink() == Path("..") / "migrations"
    assert MIGRATIONS_DIR == ROOT / "migrations"
    assert (MIGRATIONS_DIR / "released.toml").is_file() and discover()


def test_a_missing_migrations_folder_is_a_coded_error(tmp_path: Path) -> None:
    with pytest.raises(MigrationsNotFoundError) as missing:
        discover(tmp_path / "gone")
    assert missing.value.code == "E-MIGRATE-007"
    assert str(tmp_path / "gone") in missing.value.message
