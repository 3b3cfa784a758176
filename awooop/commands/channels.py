"""``awooop channels``: per-project channel secrets, dedupe TTLs and options.

- ``awooop channels set-secret PROJECT CHANNEL SECRET``: the Telegram secret token, Gitea
  webhook secret or LINE channel secret (``-`` reads it from stdin, which keeps it out of
  the shell history and the process list). The secret is never printed or logged.
- ``awooop channels set-ttl PROJECT CHANNEL SECONDS|default``: the channel's dedupe window
  (R-04); ``default`` falls back to AWOOOP_DEDUPE_TTL_S.
- ``awooop channels set-option PROJECT CHANNEL OPTION VALUE|default``: how the channel's
  deliveries are read (docs/ingest.md): ``gitea_key`` ``body|delivery`` (gitea: what keys an
  event), ``max_event_age_s`` / ``max_redelivery_age_s`` SECONDS (line: the oldest event
  accepted, and the oldest one LINE flags as redelivered).
- ``awooop channels list PROJECT``: which channels have a secret (never the secret), their TTL
  and options (``*`` marks a default).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import InvalidInputError
from awooop.ingest import credentials
from awooop.ingest.common import DEFAULT_OPTIONS

SECRET_CHANNELS = "telegram|gitea|line"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("channels", help="channel secrets, dedupe TTLs and options")
    sub = parser.add_subparsers(dest="channels_command", required=True, metavar="ACTION")

    secret = sub.add_parser(
        "set-secret", help=f"set the signing secret of a {SECRET_CHANNELS} channel"
    )
    secret.add_argument("project", help="the project id")
    secret.add_argument("channel", metavar="CHANNEL", help=SECRET_CHANNELS)
    secret.add_argument("secret", metavar="SECRET", help="the secret, or - to read it from stdin")
    secret.set_defaults(run=set_secret)

    ttl = sub.add_parser("set-ttl", help="set a channel's dedupe window")
    ttl.add_argument("project", help="the project id")
    ttl.add_argument("channel", metavar="CHANNEL", help="the channel type (telegram, gitea, ...)")
    ttl.add_argument("seconds", metavar="SECONDS", help="seconds, or 'default'")
    ttl.set_defaults(run=set_ttl)

    option = sub.add_parser("set-option", help="set how a channel's deliveries are read")
    option.add_argument("project", help="the project id")
    option.add_argument("channel", metavar="CHANNEL", help="gitea or line")
    option.add_argument(
        "option",
        metavar="OPTION",
        help="gitea_key (gitea), max_event_age_s or max_redelivery_age_s (line)",
    )
    option.add_argument("value", metavar="VALUE", help="body|delivery, seconds, or 'default'")
    option.set_defaults(run=set_option)

    show = sub.add_parser("list", help="show a project's channel settings (never secrets)")
    show.add_argument("project", help="the project id")
    show.set_defaults(run=list_channels)


async def set_secret(settings: Settings, args: argparse.Namespace) -> int:
    secret = args.secret
    if secret == "-":
        secret = sys.stdin.readline().rstrip("\r\n")
    db = await Database.open(settings.database_url, max_size=1)
    try:
        await credentials.set_secret(db, args.project, args.channel, secret)
    finally:
        await db.close()
    print(f"secret set for {args.project}/{args.channel}")
    return 0


async def set_ttl(settings: Settings, args: argparse.Namespace) -> int:
    if args.seconds == "default":
        ttl: int | None = None
    elif args.seconds.isdigit():
        ttl = int(args.seconds)
    else:
        raise InvalidInputError("SECONDS must be a whole number of seconds or 'default'")
    db = await Database.open(settings.database_url, max_size=1)
    try:
        await credentials.set_dedupe_ttl(db, args.project, args.channel, ttl)
    finally:
        await db.close()
    shown = "the default" if ttl is None else f"{ttl} s"
    print(f"dedupe TTL of {args.project}/{args.channel} set to {shown}")
    return 0


async def set_option(settings: Settings, args: argparse.Namespace) -> int:
    db = await Database.open(settings.database_url, max_size=1)
    try:
        stored = await credentials.set_option(
            db, args.project, args.channel, args.option, args.value
        )
    finally:
        await db.close()
    shown = "the default" if stored is None else str(stored)
    print(f"{args.option} of {args.project}/{args.channel} set to {shown}")
    return 0


def options_text(row: credentials.ChannelInfo) -> str:
    """The options that apply to the row's channel, ``*`` after a default."""
    shown = []
    for name, channel in credentials.OPTION_CHANNELS.items():
        if channel == row.channel_type:
            value = getattr(row, name)
            text = f"{getattr(DEFAULT_OPTIONS, name)}*" if value is None else f"{value}"
            shown.append(f"{name}={text}")
    return " ".join(shown) or "-"


async def list_channels(settings: Settings, args: argparse.Namespace) -> int:
    db = await Database.open(settings.database_url, max_size=1)
    try:
        rows = await credentials.list_channels(db, args.project)
    finally:
        await db.close()
    print(f"{'channel':<14}{'secret':<8}{'dedupe_ttl_s':<14}{'updated_at':<27}options")
    for row in rows:
        ttl = (
            f"{row.dedupe_ttl_s}" if row.dedupe_ttl_s is not None else f"{settings.dedupe_ttl_s:g}*"
        )
        print(
            f"{row.channel_type:<14}{'set' if row.has_secret else '-':<8}{ttl:<14}"
            f"{row.updated_at.isoformat(timespec='seconds'):<27}{options_text(row)}"
        )
    return 0
