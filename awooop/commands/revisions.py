"""``awooop revisions``: create, list, show, activate and roll back contract revisions.

Scripts depend on these names and outputs:
- ``awooop revisions create PROJECT FAMILY CONTRACT_ID --body JSON`` prints the new
  revision_id on its LAST line;
- ``awooop revisions activate PROJECT FAMILY CONTRACT_ID REVISION_ID [--expected REV|none]``;
- ``awooop revisions list PROJECT [--json]``;
- ``awooop revisions show PROJECT FAMILY CONTRACT_ID [REVISION_ID]`` (default: the active one);
- ``awooop revisions rollback PROJECT FAMILY CONTRACT_ID [--to REVISION_ID] [--expected ...]``.
Errors print ``error E-XXX: message`` and exit 1 (see :mod:`awooop.cli`).
"""

from __future__ import annotations

import argparse
import uuid
from typing import Any

import msgspec

from awooop.core.config import Settings
from awooop.core.db import Database
from awooop.core.errors import InvalidInputError, RevisionContractMismatchError
from awooop.revisions.records import ANY, Activation, Expected
from awooop.revisions.service import Revisions

ACTOR = "cli"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("revisions", help="manage contract revisions")
    commands = parser.add_subparsers(dest="revisions_command", required=True, metavar="ACTION")

    create = commands.add_parser("create", help="create a revision (prints its id last)")
    _contract_args(create)
    create.add_argument("--body", required=True, help="the contract body as a JSON object")
    create.set_defaults(run=run_create)

    activate = commands.add_parser("activate", help="make a revision the active one")
    _contract_args(activate)
    activate.add_argument("revision_id", help="the revision to activate")
    _expected_arg(activate)
    activate.set_defaults(run=run_activate)

    rollback = commands.add_parser("rollback", help="activate an earlier revision again")
    _contract_args(rollback)
    rollback.add_argument("--to", dest="to_revision", help="default: the previous revision")
    _expected_arg(rollback)
    rollback.set_defaults(run=run_rollback)

    listing = commands.add_parser("list", help="list a project's contracts and revisions")
    listing.add_argument("project_id", help="the project id")
    listing.add_argument("--json", action="store_true", help="one JSON document")
    listing.set_defaults(run=run_list)

    show = commands.add_parser("show", help="print a revision with its body")
    _contract_args(show)
    show.add_argument("revision_id", nargs="?", help="default: the active revision")
    show.set_defaults(run=run_show)


def _contract_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("project_id", help="the project id")
    parser.add_argument("family", help="contract family, e.g. policy_routing")
    parser.add_argument("contract_id", help="the contract id within the family")


def _expected_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--expected",
        help="optimistic check: the revision you expect to be active ('none' for no active "
        "revision); a different one fails with E-REVISION-002",
    )


def parse_uuid(text: str, what: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise InvalidInputError(f"{what} is not a revision id: {text!r}") from None


def parse_expected(text: str | None) -> Expected:
    if text is None:
        return ANY
    if text.lower() == "none":
        return None
    return parse_uuid(text, "--expected")


def parse_body(text: str) -> Any:
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        raise InvalidInputError(f"--body is not valid JSON: {exc}") from None


async def _with_revisions(settings: Settings) -> tuple[Database, Revisions]:
    db = await Database.open(settings.database_url, max_size=2)
    return db, Revisions(db)


def _print_activation(activation: Activation) -> None:
    contract = f"{activation.project_id}/{activation.contract_family}/{activation.contract_id}"
    if not activation.changed:
        print(f"{contract}: {activation.new_revision_id} is already active; nothing changed")
        return
    print(f"{contract}: {activation.old_revision_id or '(none)'} -> {activation.new_revision_id}")
    print(f"outbox event {activation.event_id}")


async def run_create(settings: Settings, args: argparse.Namespace) -> int:
    body = parse_body(args.body)
    db, revisions = await _with_revisions(settings)
    try:
        revision = await revisions.create(
            args.project_id, args.family, args.contract_id, body, ACTOR
        )
    finally:
        await db.close()
    print(f"created {revision.contract_family}/{revision.contract_id} {revision.body_hash}")
    print(revision.revision_id)
    return 0


async def run_activate(settings: Settings, args: argparse.Namespace) -> int:
    revision_id = parse_uuid(args.revision_id, "REVISION_ID")
    expected = parse_expected(args.expected)
    db, revisions = await _with_revisions(settings)
    try:
        activation = await revisions.activate(
            args.project_id,
            args.family,
            args.contract_id,
            revision_id,
            expected=expected,
            actor=ACTOR,
        )
    finally:
        await db.close()
    _print_activation(activation)
    return 0


async def run_rollback(settings: Settings, args: argparse.Namespace) -> int:
    to_revision = None if args.to_revision is None else parse_uuid(args.to_revision, "--to")
    expected = parse_expected(args.expected)
    db, revisions = await _with_revisions(settings)
    try:
        activation = await revisions.rollback(
            args.project_id,
            args.family,
            args.contract_id,
            to_revision_id=to_revision,
            expected=expected,
            actor=ACTOR,
        )
    finally:
        await db.close()
    _print_activation(activation)
    return 0


async def run_list(settings: Settings, args: argparse.Namespace) -> int:
    db, revisions = await _with_revisions(settings)
    try:
        listed = await revisions.revisions(args.project_id)
    finally:
        await db.close()
    if args.json:
        print(msgspec.json.encode({"project_id": args.project_id, "revisions": listed}).decode())
        return 0
    if not listed:
        print(f"project {args.project_id} has no contract revisions")
        return 0
    print(f"{'':1} {'FAMILY/CONTRACT':<40} {'REVISION':<36} {'CREATED':<25} BODY_HASH")
    for r in listed:
        name = f"{r.contract_family}/{r.contract_id}"
        created = r.created_at.isoformat(timespec="seconds")
        print(
            f"{'*' if r.active else ' '} {name:<40} {r.revision_id!s:<36} {created:<25} "
            f"{r.body_hash[:19]}"
        )
    print("(* = active revision)")
    return 0


async def run_show(settings: Settings, args: argparse.Namespace) -> int:
    revision_id = None if args.revision_id is None else parse_uuid(args.revision_id, "REVISION_ID")
    db, revisions = await _with_revisions(settings)
    try:
        if revision_id is None:
            revision = await revisions.active(args.project_id, args.family, args.contract_id)
        else:
            revision = await revisions.get(args.project_id, revision_id)
    finally:
        await db.close()
    if (revision.contract_family, revision.contract_id) != (args.family, args.contract_id):
        raise RevisionContractMismatchError(
            revision_id=revision.revision_id,
            belongs_to=f"{revision.contract_family}/{revision.contract_id}",
        )
    print(msgspec.json.format(msgspec.json.encode(revision), indent=2).decode())
    return 0
