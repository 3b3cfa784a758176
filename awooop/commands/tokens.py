"""``awooop tokens``: bearer tokens for the Alertmanager and API channels and for management.

- ``awooop tokens create PROJECT --channel api|alertmanager``: an ingest token of a channel;
- ``awooop tokens create PROJECT --scope manage``: a management token of the project (its runs,
  approvals, contracts and revisions over HTTP);
- ``awooop tokens create __platform__ --scope admin``: a management token for every project.
  Each prints the new token once, on stdout alone (``TOKEN=$(awooop tokens create ...)``
  works); only its hash is stored.
- ``awooop tokens list PROJECT``: token ids, scopes, channels, creation and revocation times.
- ``awooop tokens revoke PROJECT TOKEN_ID``: the token stops working at once.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from awooop.core.config import Settings
from awooop.core.context import PLATFORM_PROJECT
from awooop.core.db import Database
from awooop.core.errors import InvalidInputError
from awooop.ingest import credentials

BEARER_CHANNELS = ("api", "alertmanager")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("tokens", help="bearer tokens: ingest and management")
    sub = parser.add_subparsers(dest="tokens_command", required=True, metavar="ACTION")

    create = sub.add_parser("create", help="create a token (printed once)")
    create.add_argument("project", help="the project id (__platform__ for admin)")
    create.add_argument("--channel", choices=BEARER_CHANNELS, help="with scope ingest")
    create.add_argument(
        "--scope",
        default=credentials.INGEST_SCOPE,
        choices=credentials.SCOPES,
        help="ingest (a channel's events), read (see the project, change nothing), manage "
        f"(the project), admin (every project; PROJECT {PLATFORM_PROJECT})",
    )
    create.set_defaults(run=create_token)

    show = sub.add_parser("list", help="list a project's tokens (never the tokens)")
    show.add_argument("project", help="the project id")
    show.set_defaults(run=list_tokens)

    revoke = sub.add_parser("revoke", help="revoke a token")
    revoke.add_argument("project", help="the project id")
    revoke.add_argument("token_id", help="the token id (tokens list), not the token")
    revoke.set_defaults(run=revoke_token)


async def create_token(settings: Settings, args: argparse.Namespace) -> int:
    ingest = args.scope == credentials.INGEST_SCOPE
    if ingest and args.channel is None:
        raise InvalidInputError("an ingest token names its channel: --channel api|alertmanager")
    if not ingest and args.channel is not None:
        raise InvalidInputError(f"a {args.scope} token names no channel: drop --channel")
    credentials.check_token_project(args.project, args.scope)
    db = await Database.open(settings.database_url, max_size=1)
    try:
        if ingest:
            token_id, token = await credentials.create_token(db, args.project, args.channel)
        else:
            token_id, token = await credentials.create_management_token(
                db, args.project, args.scope
            )
    finally:
        await db.close()
    what = args.channel if ingest else args.scope
    print(token)
    print(
        f"token {token_id} for {args.project}/{what}: store it now, it is not shown again",
        file=sys.stderr,
    )
    return 0


async def list_tokens(settings: Settings, args: argparse.Namespace) -> int:
    db = await Database.open(settings.database_url, max_size=1)
    try:
        rows = await credentials.list_tokens(db, args.project)
    finally:
        await db.close()
    print(f"{'token_id':<18}{'scope':<10}{'channel':<14}{'created_at':<27}revoked_at")
    for row in rows:
        revoked = row.revoked_at.isoformat(timespec="seconds") if row.revoked_at else "-"
        print(
            f"{row.token_id:<18}{row.scope:<10}{row.channel_type or '-':<14}"
            f"{row.created_at.isoformat(timespec='seconds'):<27}{revoked}"
        )
    return 0


async def revoke_token(settings: Settings, args: argparse.Namespace) -> int:
    db = await Database.open(settings.database_url, max_size=1)
    try:
        revoked = await credentials.revoke_token(db, args.project, args.token_id)
    finally:
        await db.close()
    if not revoked:
        raise InvalidInputError(f"no live token {args.token_id} in project {args.project}")
    print(f"token {args.token_id} revoked")
    return 0
