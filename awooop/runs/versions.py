"""Handler versions: what each attempt ran, and the versions a contract's runs accept.

Every worker runs one handler at one code version (:mod:`awooop.worker.handler_version`: given
with ``awooop worker --handler-version V`` or ``AWOOOP_HANDLER_VERSION``, declared by the
handler, else derived from its module's source). Each claim records it in the attempt's
``RunClaimed`` (``handler_version``), so a run's timeline says which code ran each attempt.

A contract of a project can require versions (``awooop projects require-version P C V ...``,
``PUT /v1/projects/{p}/versions/{c}``; table ``awooop_handler_versions``, migration 0140): a
list, so that during a rolling deploy the old and the new version are both accepted, then only
the new one. Every claim statement tests the requirement on the row it locks
(``_run_version_accepted.sql``, inside ``_run_served.sql``), so a worker of another version
(a stale one) never takes such a run, on any path: it leaves it, as a run it does not serve,
for the workers that may take it (no failure, no attempt spent). A waiting run that no live
worker may take for its version has ``blocked_on`` ``no_worker_for_version``, naming the
versions its contract accepts and those the live workers run (:class:`VersionWait`).

The functions that touch rows run in a tenant transaction of the project (row-level security)
or on the platform role.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import msgspec

from awooop.core.db import Connection
from awooop.core.errors import HandlerVersionError, VersionRequirementNotFoundError
from awooop.core.logs import get_logger
from awooop.eventlog import queries
from awooop.runs.pause_rules import MAX_ACTOR, MAX_KEY, check_text

log = get_logger(__name__)

MAX_VERSION = 64  # characters (awooop_processes.handler_version's CHECK)
MAX_VERSIONS = 16  # versions one contract accepts at once (the table's CHECK)
LIST_LIMIT = 1000
VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+-]*")

SET = queries.load("handler_versions_set")
CLEAR = queries.load("handler_versions_clear")
LIST = queries.load("handler_versions_list")
WAITS = queries.load("handler_versions_waits")


# --- pure ------------------------------------------------------------------------------------


def check_version(value: Any, what: str = "handler version") -> str:
    """Pure: ``value`` as a handler version, or E-VERSION-001 naming ``what`` and the value."""
    if not isinstance(value, str) or len(value) > MAX_VERSION or VERSION.fullmatch(value) is None:
        raise HandlerVersionError(
            f"{what} {value!r}: a handler version is 1 to {MAX_VERSION} characters, letters, "
            "digits and . _ - + :, starting with a letter or a digit",
            version=repr(value)[:80],
        )
    return value


def check_versions(values: Sequence[Any]) -> tuple[str, ...]:
    """Pure: the versions a contract accepts, each checked, duplicates dropped, in the order
    given; 1 to :data:`MAX_VERSIONS` of them (E-VERSION-001)."""
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise HandlerVersionError("give the accepted handler versions as a list")
    found = tuple(dict.fromkeys(check_version(v) for v in values))
    if not 1 <= len(found) <= MAX_VERSIONS:
        raise HandlerVersionError(
            f"a contract accepts 1 to {MAX_VERSIONS} handler versions, not {len(found)}"
        )
    return found


def check_contract(contract_id: str) -> str:
    return check_text("contract", contract_id, MAX_KEY, empty=False)


def accepts(accepted: Iterable[str] | None, version: str | None) -> bool:
    """Pure: the rule of ``_run_version_accepted.sql``: a contract without a requirement
    (None) accepts every worker; a worker without a version (None: a statement that runs
    nothing, as the reaper's) is not tested."""
    return accepted is None or version is None or version in set(accepted)


def versions_text(versions: Iterable[str]) -> str:
    return ", ".join(versions)


class VersionWait(msgspec.Struct, frozen=True, kw_only=True):
    """What ``blocked_on`` knows of a waiting run's contract that requires handler versions:
    the versions it accepts, and those the live worker processes that serve it run (None:
    none records one, so that the other rows of ``blocked_on`` say what blocks it)."""

    project_id: str
    contract_id: str
    accepted: tuple[str, ...]
    running: tuple[str, ...] | None = None

    @property
    def blocks(self) -> bool:
        """Whether no live worker that serves the run may take it for its version."""
        return self.running is not None and not set(self.accepted) & set(self.running)

    @property
    def summary(self) -> str:
        return (
            f"contract {self.contract_id} of {self.project_id} accepts handler version(s) "
            f"{versions_text(self.accepted)}; the live workers that serve it run "
            f"{versions_text(self.running or ())}"
        )

    @property
    def next_action(self) -> str:
        newest = self.accepted[-1]
        return (
            f"start a worker of an accepted version (awooop worker --handler H "
            f"--handler-version {newest} --contract {self.contract_id}), or accept another: "
            f"awooop projects require-version {self.project_id} {self.contract_id} V ..."
        )


class Requirement(msgspec.Struct, frozen=True):
    """One row of ``awooop_handler_versions``: the versions a contract's runs accept."""

    project_id: str
    contract_id: str
    versions: tuple[str, ...]
    set_by: str
    set_at: datetime


def _requirement(row: Any) -> Requirement:
    return Requirement(
        row["project_id"], row["contract_id"], tuple(row["versions"]), row["set_by"], row["set_at"]
    )


# --- I/O -------------------------------------------------------------------------------------


async def require(
    conn: Connection, project_id: str, contract_id: str, versions: Sequence[Any], *, actor: str
) -> Requirement:
    """Make or replace the versions ``contract_id``'s runs accept (checked first: a bad one
    is E-VERSION-001 and nothing is written)."""
    accepted = check_versions(versions)
    check_contract(contract_id)
    check_text("actor", actor, MAX_ACTOR, empty=False)
    made = _requirement(await conn.fetchrow(SET, project_id, contract_id, list(accepted), actor))
    log.info(
        "handler_versions_required",
        project_id=project_id,
        contract_id=contract_id,
        versions=list(accepted),
        actor=actor,
    )
    return made


async def clear(conn: Connection, project_id: str, contract_id: str, *, actor: str) -> Requirement:
    """Drop the requirement of ``contract_id`` (E-VERSION-002 when there is none)."""
    check_contract(contract_id)
    row = await conn.fetchrow(CLEAR, project_id, contract_id)
    if row is None:
        raise VersionRequirementNotFoundError(
            f"contract {contract_id} of project {project_id} requires no handler version",
            project_id=project_id,
        )
    log.info(
        "handler_versions_cleared", project_id=project_id, contract_id=contract_id, actor=actor
    )
    return _requirement(row)


async def listing(conn: Connection, project_id: str | None = None) -> list[Requirement]:
    """The requirements of ``project_id`` (None: of every project the role sees)."""
    return [_requirement(r) for r in await conn.fetch(LIST, project_id, LIST_LIMIT)]


async def waits(
    conn: Connection, pairs: Iterable[tuple[str, str]]
) -> dict[tuple[str, str], VersionWait]:
    """For ``blocked_on``: the :class:`VersionWait` of each (project, contract) pair whose
    contract requires versions (one probe of the primary key per pair)."""
    wanted = sorted(set(pairs))
    if not wanted:
        return {}
    rows = await conn.fetch(WAITS, [p for p, _ in wanted], [c for _, c in wanted])
    return {
        (r["project_id"], r["contract_id"]): VersionWait(
            project_id=r["project_id"],
            contract_id=r["contract_id"],
            accepted=tuple(r["versions"]),
            running=None if r["running"] is None else tuple(r["running"]),
        )
        for r in rows
    }
