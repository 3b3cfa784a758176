"""``set|clear|list`` of a row kept with its history (a budget, a rate limit, a price of
:mod:`awooop.llm.flow_store`), one way for every kind: what differs between kinds (the
command's words, ``set``'s own options and what it prints, the list's columns) is a
:class:`RowVerbs`, declared in :mod:`awooop.commands.projects_flow` and
:mod:`awooop.commands.projects_prices`.

``set`` prints ``<kind> of <key>: <what is set>``, ``clear`` ``<kind> of <key> ended`` (the
row as JSON with ``--json``), ``list`` a table (a JSON array with ``--json``).
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic

from awooop.commands.output import answer, table
from awooop.commands.projects_db import (
    Work,
    in_platform,
    in_project,
    listing_options,
    listing_scope,
)
from awooop.commands.runs_parsing import cli_actor
from awooop.core.config import Settings
from awooop.ingest.credentials import check_project_id
from awooop.llm import flow_store
from awooop.llm.flow_rules import check_model, key_text, view
from awooop.llm.flow_store import R


@dataclass(frozen=True)
class RowVerbs(Generic[R]):
    """One kind's ``awooop projects <kind.slug> set|clear|list``."""

    help: str
    kind: flow_store.Kind[R]
    set_help: str
    clear_help: str
    clear_description: str
    list_help: str
    model_help: str
    # set: its own options; the write its arguments ask for (:mod:`awooop.llm.flow_forms`:
    # (args, project, model, actor) -> work); what it prints after "<kind> of <key>: ".
    options: Callable[[Any], None]
    write: Callable[[Any, str, str, str], Work[R]]
    says: Callable[[R], str]
    # list: the rows (flow_store.budgets, ...), the table's header and a row's cells.
    rows: Callable[..., Awaitable[list[R]]]
    header: list[str]
    cells: Callable[[R], list[str]]


def register(sub: Any, verbs: RowVerbs[Any]) -> None:
    parser = sub.add_parser(verbs.kind.slug, help=verbs.help)
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    setter = actions.add_parser("set", help=verbs.set_help, description=verbs.set_help)
    _target(setter, verbs)
    verbs.options(setter)
    setter.set_defaults(run=functools.partial(set_row, verbs))
    clear = actions.add_parser("clear", help=verbs.clear_help, description=verbs.clear_description)
    _target(clear, verbs)
    clear.set_defaults(run=functools.partial(clear_row, verbs))
    listing = actions.add_parser("list", help=verbs.list_help, description=verbs.list_help)
    listing_options(listing, ended="ended rows too", rows="rows")
    listing.set_defaults(run=functools.partial(list_rows, verbs))


def _target(parser: Any, verbs: RowVerbs[Any]) -> None:
    parser.add_argument("project", metavar="PROJECT", help="the project")
    if verbs.kind.per_model:
        parser.add_argument("--model", required=True, help=verbs.model_help)
    else:
        parser.add_argument("--model", default=None, help=verbs.model_help)
    parser.add_argument("--json", action="store_true", help="the row as JSON")


async def set_row(verbs: RowVerbs[Any], settings: Settings, args: argparse.Namespace) -> int:
    project_id, model = check_project_id(args.project), check_model(args.model)
    made = await in_project(settings, project_id, verbs.write(args, project_id, model, cli_actor()))
    key = key_text(project_id, model)
    return answer(args, view(made), f"{verbs.kind.word} of {key}: {verbs.says(made)}")


async def clear_row(verbs: RowVerbs[Any], settings: Settings, args: argparse.Namespace) -> int:
    project_id, model = check_project_id(args.project), check_model(args.model)
    ended = await in_project(
        settings,
        project_id,
        lambda conn: flow_store.end(conn, verbs.kind, project_id, model, actor=cli_actor()),
    )
    return answer(args, view(ended), f"{verbs.kind.word} of {key_text(project_id, model)} ended")


async def list_rows(verbs: RowVerbs[Any], settings: Settings, args: argparse.Namespace) -> int:
    project_id = listing_scope(args)
    found = await in_platform(
        settings, lambda conn: verbs.rows(conn, project_id, history=args.history, limit=args.limit)
    )
    listed = table(verbs.header, [verbs.cells(r) for r in found], wide=args.wide)
    return answer(args, [view(r) for r in found], listed)
