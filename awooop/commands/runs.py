"""``awooop runs``: operate on one run from the command line.

    awooop runs show    PROJECT RUN_ID
    awooop runs cancel  PROJECT RUN_ID [--actor NAME] [--reason TEXT]
    awooop runs approve PROJECT RUN_ID --token TOKEN [--actor NAME]
    awooop runs reject  PROJECT RUN_ID --token TOKEN [--actor NAME] [--reason TEXT]
    awooop runs retry   PROJECT RUN_ID [--attempts N] [--actor NAME]

Each prints the run's state as one JSON object. Refusals print ``error E-XXX: message`` and
exit 1 (for example E-APPROVAL-003 for a token used twice, E-RUN-001 for cancelling a
finished run). The token may also come from ``AWOOOP_APPROVAL_TOKEN`` (keeps it out of
process listings).
"""

from __future__ import annotations

import argparse
import getpass
import os
import uuid
from typing import Any

import msgspec

from awooop.config import Settings
from awooop.db import Database
from awooop.errors import InvalidInputError, RunNotFoundError
from awooop.runs import approvals, control, store
from awooop.runs.state import RunState

TOKEN_ENV = "AWOOOP_APPROVAL_TOKEN"  # noqa: S105 - the name of a variable, not a secret


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("runs", help="show, cancel, approve, reject or retry a run")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = actions.add_parser(name, help=help_text)
        sub.add_argument("project_id")
        sub.add_argument("run_id")
        sub.set_defaults(run=run)
        return sub

    add("show", "print the run's state")
    cancel = add("cancel", "cancel a run that has not finished")
    approve = add("approve", "approve a run waiting for approval (single-use token)")
    reject = add("reject", "reject a run waiting for approval (single-use token)")
    retry = add("retry", "send a FAILED run back to PENDING with more attempts")
    for sub in (cancel, approve, reject, retry):
        sub.add_argument("--actor", default=None, help="who acts (default: the OS user)")
    for sub in (cancel, reject):
        sub.add_argument("--reason", default="")
    for sub in (approve, reject):
        sub.add_argument("--token", default=None, help=f"the approval token (or ${TOKEN_ENV})")
    retry.add_argument("--attempts", type=int, default=None, help="extra attempts (default: 3)")


def state_json(state: RunState) -> str:
    shown = {
        k: v
        for k, v in msgspec.to_builtins(state).items()
        if k not in ("input", "saga_steps", "result") or v
    }
    return msgspec.json.encode(shown).decode()


def parse_run_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise InvalidInputError(f"run id {text!r} is not a UUID") from None


async def run(settings: Settings, args: argparse.Namespace) -> int:
    run_id = parse_run_id(args.run_id)
    project = args.project_id
    actor = getattr(args, "actor", None) or f"cli:{getpass.getuser()}"
    token = None
    if args.action in ("approve", "reject"):
        token = args.token or os.environ.get(TOKEN_ENV)
        if not token:
            raise InvalidInputError(f"an approval token is needed: --token or ${TOKEN_ENV}")
    db = await Database.open(settings.database_url, max_size=1)
    try:

        async def act(conn: Any) -> RunState:
            match args.action:
                case "show":
                    state = await store.load(conn, run_id)
                    if state is None:
                        raise RunNotFoundError(run_id=run_id)
                    return state
                case "cancel":
                    return await control.cancel(conn, run_id, actor=actor, reason=args.reason)
                case "approve" | "reject":
                    assert token is not None
                    decision = (
                        approvals.Decision.APPROVED
                        if args.action == "approve"
                        else approvals.Decision.REJECTED
                    )
                    return await approvals.decide(
                        conn,
                        run_id,
                        token,
                        decision,
                        actor=actor,
                        reason=getattr(args, "reason", ""),
                    )
                case "retry":
                    return await control.retry(
                        conn, run_id, actor=actor, extra_attempts=args.attempts or 3
                    )
            raise InvalidInputError(f"unknown action {args.action}")

        state = await db.in_tenant(project, act)
    finally:
        await db.close()
    print(state_json(state))
    return 0
