"""``awooop projects require-version|clear-version|required-versions``: the handler versions a
contract's runs accept.

    awooop projects require-version PROJECT CONTRACT VERSION [VERSION ...] [--json]
    awooop projects clear-version PROJECT CONTRACT [--json]
    awooop projects required-versions [--project P] [--json]

``require-version`` makes or replaces the list (:mod:`awooop.runs.versions`): from the moment
it commits, a worker whose handler version is not in it takes no run of the contract on any
path, and leaves such runs to the workers that may (``blocked_on``: ``no_worker_for_version``
while none is alive). Give the old and the new version during a rolling deploy, then only the
new one. A version is 1 to 64 characters, letters, digits and ``. _ - + :`` (E-VERSION-001,
nothing written). ``clear-version`` drops the requirement (E-VERSION-002 when there is none).
Who acted is recorded as ``cli:<OS user>``.
"""

from __future__ import annotations

import argparse
from typing import Any

from awooop.commands.output import answer, table, when
from awooop.commands.projects_db import in_platform, in_project, project_or_all
from awooop.commands.runs_parsing import cli_actor
from awooop.core.config import Settings
from awooop.ingest.credentials import check_project_id
from awooop.runs import versions
from awooop.runs.versions import Requirement, versions_text


def register_actions(sub: Any) -> None:
    """The handler version actions of ``awooop projects``."""
    need = sub.add_parser(
        "require-version", help="the handler versions a contract's runs accept (replaced)"
    )
    need.add_argument("project", metavar="PROJECT", help="the project")
    need.add_argument("contract", metavar="CONTRACT", help="the contract")
    need.add_argument("versions", metavar="VERSION", nargs="+", help="an accepted version")
    need.add_argument("--json", action="store_true", help="the requirement as JSON")
    need.set_defaults(run=require_versions)

    drop = sub.add_parser("clear-version", help="a contract's runs accept every handler version")
    drop.add_argument("project", metavar="PROJECT", help="the project")
    drop.add_argument("contract", metavar="CONTRACT", help="the contract")
    drop.add_argument("--json", action="store_true", help="the dropped requirement as JSON")
    drop.set_defaults(run=clear_versions)

    listing = sub.add_parser("required-versions", help="the contracts that require versions")
    listing.add_argument("--project", default=None, help="only this project's")
    listing.add_argument("--json", action="store_true", help="a JSON array instead of a table")
    listing.set_defaults(run=list_versions)


def requirement_view(r: Requirement) -> dict[str, Any]:
    return {
        "project_id": r.project_id,
        "contract_id": r.contract_id,
        "versions": list(r.versions),
        "set_by": r.set_by,
        "set_at": r.set_at,
    }


async def require_versions(settings: Settings, args: argparse.Namespace) -> int:
    project_id = check_project_id(args.project)
    accepted = versions.check_versions(args.versions)  # before connecting: nothing written
    made = await in_project(
        settings,
        project_id,
        lambda conn: versions.require(conn, project_id, args.contract, accepted, actor=cli_actor()),
    )
    text = f"contract {made.contract_id} of {project_id}: {versions_text(made.versions)}"
    return answer(args, requirement_view(made), text)


async def clear_versions(settings: Settings, args: argparse.Namespace) -> int:
    project_id = check_project_id(args.project)
    gone = await in_project(
        settings,
        project_id,
        lambda conn: versions.clear(conn, project_id, args.contract, actor=cli_actor()),
    )
    text = f"contract {gone.contract_id} of {project_id}: every handler version"
    return answer(args, requirement_view(gone), text)


async def list_versions(settings: Settings, args: argparse.Namespace) -> int:
    project_id = project_or_all(args.project)
    found = await in_platform(settings, lambda conn: versions.listing(conn, project_id))
    rows = [
        [r.project_id, r.contract_id, versions_text(r.versions), r.set_by, when(r.set_at)]
        for r in found
    ]
    text = table(["PROJECT", "CONTRACT", "VERSIONS", "SET_BY", "SET_AT"], rows)
    return answer(args, [requirement_view(r) for r in found], text)
