"""``awooop tenants``: bind producer services' database logins to their projects (R-43).

- ``awooop tenants grant ROLE PROJECT...``: ROLE (a login role of its own, e.g. created with
  ``CREATE ROLE shop_svc LOGIN PASSWORD '...'``) becomes a member of ``awooop_producer`` and may
  submit runs and emit events for these projects only, through the producer library inside
  its own transactions; it sees nothing of other projects, of credentials or of the platform,
  whatever it sets.
- ``awooop tenants revoke ROLE PROJECT...``: unbind projects (with none left, the role leaves
  ``awooop_producer``).
- ``awooop tenants list [--json]``: every binding.

Run as the tables' owner (the role that runs ``awooop migrate``): the command connects as the
configured login without taking a runtime role. See :mod:`awooop.ingest.tenants`.
"""

from __future__ import annotations

import argparse
from typing import Any

from awooop.commands.output import table, to_json
from awooop.core.config import Settings
from awooop.core.errors import InvalidInputError
from awooop.core.pools import connect
from awooop.ingest import tenants


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "tenants", help="bind producer logins to their projects (run as the owner)"
    )
    sub = parser.add_subparsers(dest="tenants_command", required=True, metavar="ACTION")

    grant = sub.add_parser("grant", help="bind a login role to projects")
    grant.add_argument("role", help="the producer service's database login")
    grant.add_argument("projects", nargs="+", metavar="PROJECT", help="the projects it may write")
    grant.set_defaults(run=grant_projects)

    revoke = sub.add_parser("revoke", help="unbind projects from a login role")
    revoke.add_argument("role", help="the producer service's database login")
    revoke.add_argument(
        "projects", nargs="+", metavar="PROJECT", help="the projects it may no longer write"
    )
    revoke.set_defaults(run=revoke_projects)

    show = sub.add_parser("list", help="every login and its projects")
    show.add_argument("--json", action="store_true", help="one JSON object per login")
    show.set_defaults(run=list_bindings)


async def grant_projects(settings: Settings, args: argparse.Namespace) -> int:
    conn = await connect(settings.database_url)
    try:
        added = await tenants.grant(conn, args.role, args.projects)
    finally:
        await conn.close()
    already = [p for p in dict.fromkeys(args.projects) if p not in added]
    print(f"{args.role} bound to {', '.join(added) or 'nothing new'}", end="")
    print(f" (already: {', '.join(already)})" if already else "")
    return 0


async def revoke_projects(settings: Settings, args: argparse.Namespace) -> int:
    conn = await connect(settings.database_url)
    try:
        removed = await tenants.revoke(conn, args.role, args.projects)
    finally:
        await conn.close()
    if not removed:
        raise InvalidInputError(f"{args.role} is bound to none of {', '.join(args.projects)}")
    print(f"{args.role}: {removed} binding(s) removed")
    return 0


async def list_bindings(settings: Settings, args: argparse.Namespace) -> int:
    conn = await connect(settings.database_url)
    try:
        bindings = await tenants.list_bindings(conn)
    finally:
        await conn.close()
    if args.json:
        print(to_json(bindings))
        return 0
    rows = [
        [
            b.role_name,
            ",".join(b.projects),
            "ok"
            if b.role_exists and b.producer
            else ("role missing" if not b.role_exists else "not in awooop_producer"),
        ]
        for b in bindings
    ]
    print(table(["role", "projects", "state"], rows))
    return 0
