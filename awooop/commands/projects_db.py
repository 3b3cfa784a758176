"""What the ``awooop projects`` commands share: each runs one transaction on a pool of one
connection (in a tenant transaction of the project it names, or on the platform role), and
a listing takes the same options (``--project``, ``--history``, ``--limit``, ``--json``,
``--wide``) and checks them the same way."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from awooop.commands.output import add_wide
from awooop.core.config import Settings
from awooop.core.db import Connection, Database
from awooop.core.errors import InvalidInputError
from awooop.ingest.credentials import check_project_id
from awooop.runs.pause_rules import Scope, scope_of
from awooop.services import Services

T = TypeVar("T")
Work = Callable[[Connection], Awaitable[T]]


async def _once(settings: Settings, call: Callable[[Database], Awaitable[T]]) -> T:
    services = await Services.open(settings, db_pool_size=1)
    try:
        return await call(services.db)
    finally:
        await services.close()


async def in_project(settings: Settings, project_id: str, fn: Work[T]) -> T:
    """``fn`` in a tenant transaction of ``project_id`` (row-level security applies)."""
    return await _once(settings, lambda db: db.in_tenant(project_id, fn))


async def in_platform(settings: Settings, fn: Work[T]) -> T:
    """``fn`` on the platform role, which reads every project's rows."""
    return await _once(settings, lambda db: db.in_platform(fn))


async def platform_writes(settings: Settings, fn: Work[T]) -> T:
    """``fn`` on the platform role, for rows a project's own token may not change."""
    return await _once(settings, lambda db: db.in_platform_writes(fn))


def listing_options(parser: Any, *, ended: str, rows: str) -> None:
    """A listing's options: ``ended`` says what ``--history`` adds, ``rows`` what it counts."""
    parser.add_argument("--project", default=None, help="only this project's")
    parser.add_argument("--history", action="store_true", help=ended)
    parser.add_argument("--limit", type=int, default=1000, help=f"at most N {rows}")
    parser.add_argument("--json", action="store_true", help="a JSON array instead of a table")
    add_wide(parser)


def scope_target(args: argparse.Namespace) -> tuple[str, Scope, str]:
    """The project, scope and scope key that ``PROJECT [--channel C | --contract K]`` name."""
    project_id = check_project_id(args.project)
    scope, key = scope_of(args.channel, args.contract)
    return project_id, scope, key


def project_or_all(text: str | None) -> str | None:
    """The project ``--project`` names, None (every project) without it."""
    return None if text is None else check_project_id(text)


def listing_scope(args: argparse.Namespace) -> str | None:
    """The project a listing names (None: every project), once ``--limit`` is checked."""
    if args.limit < 1:
        raise InvalidInputError("--limit must be at least 1")
    return project_or_all(args.project)
