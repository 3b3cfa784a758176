"""Whether this release's code can run on the database's schema.

A process runs on a database that applied every migration file of its release, each as a
released version (awooop/core/migration_checksums.py), and whose schema floor (the oldest
release that may run on it, migration 0120: raised by a migration that removes or changes what
older code uses) is not above its release. Other files the database applied come from a newer
release's ``awooop migrate`` that only added to the schema: the process runs on them and says
so in its start log and in ``awooop doctor``. Every long-running process checks at start and
refuses with E-MIGRATE-003 otherwise; ``/readyz`` reports the same check.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from awooop.core.db import Connection
from awooop.core.errors import SchemaMismatchError
from awooop.core.logs import get_logger
from awooop.core.migrate import MIGRATIONS_DIR, Migration, discover, read_applied, unreleased
from awooop.core.migration_checksums import Recorded

log = get_logger(__name__)

TABLE_EXISTS = "SELECT to_regclass('awooop_schema_migrations') IS NOT NULL"
# Before 0120 there is no floor: every release may run.
FLOOR_EXISTS = "SELECT to_regclass('awooop_schema_floor') IS NOT NULL"
FLOOR = "SELECT oldest_release FROM awooop_schema_floor"
NO_FLOOR = "0000"


@dataclass(frozen=True)
class SchemaState:
    missing: list[str]  # this release's files the database has not applied
    unreleased: list[str]  # applied, but as a version no release shipped
    newer: list[str]  # applied by a newer release; this release does not know them
    release: str = NO_FLOOR  # this release's newest migration file
    floor: str = NO_FLOOR  # the oldest release that may run on the schema

    @property
    def too_old(self) -> bool:
        return self.floor > self.release

    @property
    def runnable(self) -> bool:
        return not self.missing and not self.unreleased and not self.too_old

    def problem(self) -> str:
        """What is wrong and what to do, for an operator; empty when runnable."""
        parts = []
        if self.missing:
            parts.append(
                f"not applied: {', '.join(self.missing)} (run this release's `awooop migrate` "
                "before starting its processes)"
            )
        if self.unreleased:
            parts.append(
                f"applied as versions this release does not ship: {', '.join(self.unreleased)} "
                "(`awooop doctor`; docs/operations.md, Upgrading)"
            )
        if self.too_old:
            parts.append(
                f"a newer release's migration {self.floor} changed what this release's code "
                f"uses (this release ends at {self.release}): run a release that has it"
            )
        return "; ".join(parts)


def compare_schema(
    files: list[Migration],
    applied: Mapping[str, Recorded],
    floor: str = NO_FLOOR,
    directory: Path = MIGRATIONS_DIR,
) -> SchemaState:
    """Pure but for reading released.toml: this release's files against the applied rows and
    the schema floor."""
    names = {m.name for m in files}
    return SchemaState(
        missing=[m.name for m in files if m.name not in applied],
        unreleased=unreleased(files, applied, directory),
        newer=sorted(set(applied) - names),
        release=max(names, default=NO_FLOOR),
        floor=floor,
    )


@cache
def release_files() -> tuple[Migration, ...]:
    """This release's migration files, read once per process."""
    return tuple(discover())


def release_name() -> str:
    """This release's name: its newest migration file."""
    return max((m.name for m in release_files()), default=NO_FLOOR)


async def read_schema_state(conn: Connection) -> SchemaState:
    files = list(release_files())
    if not await conn.fetchval(TABLE_EXISTS):
        return SchemaState(missing=[m.name for m in files], unreleased=[], newer=[])
    applied = await read_applied(conn)
    floor = await conn.fetchval(FLOOR) if await conn.fetchval(FLOOR_EXISTS) else None
    return compare_schema(files, applied, floor or NO_FLOOR)


async def require_runnable_schema(conn: Connection) -> SchemaState:
    """Raise E-MIGRATE-003 unless this release can run on the database's schema."""
    state = await read_schema_state(conn)
    if not state.runnable:
        raise SchemaMismatchError(f"this release cannot run on this database: {state.problem()}")
    if state.newer:
        log.warning("schema_has_newer_migrations", migrations=state.newer)
    return state
