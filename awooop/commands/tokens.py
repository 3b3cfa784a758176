"""``awooop tokens``: bearer tokens for the Alertmanager and API channels.

- ``awooop tokens create PROJECT --channel api|alertmanager``: prints the new token once, on
  stdout alone (``TOKEN=$(awooop tokens create ...)`` works); only its hash is stored.
- ``awooop tokens list PROJECT``: token ids, scopes, channels, creation and revocation times.
- ``awooop tokens revoke PROJECT TOKEN_ID``: the token stops working at once.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from awooop.config import Settings
from awooop.db import Database
from awooop.errors import InvalidInputError
from awooop.ingest import credentials

BEARER_CHANNELS = ("api", "alertmanager")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("tokens", help="bearer tokens for api and alertmanager")
    sub = parser.add_subparsers(dest="tokens_command", required=True, metavar="ACTION")

    create = sub.add_parser("create", help="create a token (printed once)")
    create.add_argument("project")
    create.add_argument("--channel", required=True, choices=BEARER_CHANNELS)
    create.add_argument(
        "--scope", default=credentials.INGEST_SCOPE, choices=(credentials.INGEST_SCOPE,)
    )
    create.set_defaults(run=create_token)

    show = sub.add_parser("list", help="list a project's tokens (never the tokens)")
    show.add_argument("project")
    show.set_defaults(run=list_tokens)

    revoke = sub.add_parser("revoke", help="revoke a token")
    revoke.add_argument("project")
    revoke.add_argument("token_id")
    revoke.set_defaults(run=revoke_token)


async def create_token(settings: Settings, args: argparse.Namespace) -> int:
    db = await Database.open(settings.database_url, max_size=1)
    try:
        token_id, token = await credentials.create_token(db, args.project, args.channel)
    finally:
        await db.close()
    print(token)
    print(
        f"token {token_id} for {args.project}/{args.channel}: store it now, it is not shown again",
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
