"""``awooop projects set|shares``: a project's weight in the fair order between projects.

    awooop projects set PROJECT --weight N [--json]
    awooop projects shares [--project P] [--json]

While several projects have runs waiting, workers start them in weighted fair order (a project
with weight 2 gets twice the starts of one with weight 1); one project alone gets every free
slot whatever its weight. ``set`` applies to runs submitted from then on (the weight is read at
intake). ``shares`` lists the projects whose weight was ever set (all others have weight 1).
Both act on the platform role (a project's own token cannot raise its share); who set a
weight is recorded as ``cli:<OS user>``.
"""

from __future__ import annotations

import argparse
from typing import Any

from awooop.commands.output import answer, table, when
from awooop.commands.projects_db import in_platform, platform_writes, project_or_all
from awooop.commands.runs_parsing import cli_actor
from awooop.core.config import Settings
from awooop.ingest.credentials import check_project_id
from awooop.runs import fairness
from awooop.runs.fairness import Share


def register_actions(sub: Any) -> None:
    """The share actions of ``awooop projects``."""
    setter = sub.add_parser("set", help="a project's weight in the fair order between projects")
    setter.add_argument("project", metavar="PROJECT", help="the project")
    setter.add_argument(
        "--weight",
        type=int,
        required=True,
        help=f"{fairness.MIN_WEIGHT}-{fairness.MAX_WEIGHT}; default {fairness.DEFAULT_WEIGHT}",
    )
    setter.add_argument("--json", action="store_true", help="the share as JSON")
    setter.set_defaults(run=set_weight)

    listing = sub.add_parser("shares", help="the projects' weights (those ever set)")
    listing.add_argument("--project", default=None, help="only this project's")
    listing.add_argument("--json", action="store_true", help="a JSON array instead of a table")
    listing.set_defaults(run=list_shares)


def share_view(share: Share) -> dict[str, Any]:
    return {
        "project_id": share.project_id,
        "weight": share.weight,
        "set_by": share.set_by,
        "set_at": share.set_at,
    }


async def set_weight(settings: Settings, args: argparse.Namespace) -> int:
    project_id = check_project_id(args.project)
    weight = fairness.check_weight(args.weight)
    share = await platform_writes(
        settings, lambda conn: fairness.set_share(conn, project_id, weight, actor=cli_actor())
    )
    return answer(args, share_view(share), f"{project_id}: weight {share.weight}")


async def list_shares(settings: Settings, args: argparse.Namespace) -> int:
    project_id = project_or_all(args.project)
    found = await in_platform(settings, lambda conn: fairness.shares(conn, project_id))
    views = [share_view(s) for s in found]
    rows = [
        [v["project_id"], str(v["weight"]), v["set_by"] or "-", when(v["set_at"])] for v in views
    ]
    return answer(args, views, table(["PROJECT", "WEIGHT", "SET_BY", "SET_AT"], rows))
