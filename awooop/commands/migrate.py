"""``awooop migrate``: create the database if missing and apply pending migrations."""

from __future__ import annotations

import argparse
from typing import Any

from awooop.core.config import Settings
from awooop.core.migrate import migrate


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("migrate", help="apply database migrations")
    parser.set_defaults(run=run)


async def run(settings: Settings, args: argparse.Namespace) -> int:
    applied = await migrate(settings.database_url)
    print(f"applied {len(applied)} migration(s)" + (": " + ", ".join(applied) if applied else ""))
    return 0
