"""``awooop runs``: list runs, and operate on one run from the command line.

    awooop runs list    [--project P] [--status S] [--since 2h|ISO] [--limit N] [--json]
    awooop runs show    [PROJECT] RUN_ID [--json]
    awooop runs cancel  [PROJECT] RUN_ID [--actor NAME] [--reason TEXT] [--json]
    awooop runs approve [PROJECT] RUN_ID --token TOKEN [--actor NAME] [--json]
    awooop runs reject  [PROJECT] RUN_ID --token TOKEN [--actor NAME] [--reason TEXT] [--json]
    awooop runs retry   [PROJECT] RUN_ID [--attempts N] [--actor NAME] [--json]
    awooop runs retry   --filter KEY=VALUE ... [--dry-run] [--attempts N] [--actor NAME] [--json]
    awooop runs cancel  --filter KEY=VALUE ... [--dry-run] [--reason TEXT] [--actor NAME] [--json]
    awooop runs operation OPERATION_ID [--resume] [--json]

Output is an aligned table (``list``, with each run's ``blocked_on`` reason; ``show`` starts
with the ``blocked_on`` line, what the run waits for and the next safe action
(:mod:`awooop.runs.blocked`), then adds the run's timeline: every event with its attempt,
worker, trace id and actor, and its model calls: each ``run.llm`` call with its attempt, model,
contract, the policy revision and body hash that served it, duration, outcome and trace id),
or JSON with ``--json``: ``list`` one array (each row with its ``blocked_on`` object), ``show``
one object ``{"state": ..., "blocked_on": ..., "timeline": [...], "model_calls": [...]}``, the
actions the run's new state. Without PROJECT
the run's project is looked up. Refusals print ``error E-XXX: message`` and exit 1 (for
example E-APPROVAL-003 for a token used twice, E-RUN-001 for cancelling a finished run,
E-INPUT-001 for a bad ``--since``). The approval token may also come from
``AWOOOP_APPROVAL_TOKEN`` (keeps it out of process listings).

Every change records who made it: the event's metadata carries ``actor`` = ``cli:<OS user>``
(``--actor`` names the person in the event itself, default the same).

With ``--filter`` (the console list's filters: project, status, channel, blocked_on, since, q;
repeat the option, all must match) ``retry`` and ``cancel`` act on every matching run as one
operation (:mod:`awooop.runs.bulk`): the preview first (how many runs, per project), then,
unless ``--dry-run``, the operation is recorded and run in batches here, one progress line per
batch on stderr; each event's metadata also carries ``operation_id``. ``runs operation`` shows
an operation, and ``--resume`` continues one whose process stopped (no run is changed twice;
the ``bulk_operations`` loop does the same by itself once the operation has had no batch for
30 s).
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import os
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import msgspec

from awooop.commands.output import add_wide, table, to_json, when
from awooop.core.config import Settings
from awooop.core.db import Connection, Database
from awooop.core.errors import InvalidInputError, RunNotFoundError
from awooop.ingest.credentials import check_project_id
from awooop.log.state import RunState
from awooop.runs import approvals, blocked_facts, bulk, control, listing, reads, store
from awooop.runs.blocked import BlockedOn, describe
from awooop.runs.listing import FILTER_KEYS, Decide
from awooop.services import redis_client
from projections import model_calls, timeline
from streams.keys import Keys

TOKEN_ENV = "AWOOOP_APPROVAL_TOKEN"  # noqa: S105 - the name of a variable, not a secret
REDIS_TIMEOUT_S = 3.0  # blocked_on asks Redis about readers and dead letters; never hang on it


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("runs", help="list runs; show, cancel, approve, reject, retry")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser("list", help="runs, most recently changed first")
    listing.add_argument("--project", default=None, help="only this project")
    listing.add_argument("--status", default=None, help="only runs in this state (FAILED, ...)")
    listing.add_argument("--since", default=None, help=f"changed since: {reads.SINCE_HELP}")
    listing.add_argument("--limit", type=int, default=reads.DEFAULT_LIMIT, help="at most N rows")
    listing.add_argument("--json", action="store_true", help="a JSON array instead of a table")
    add_wide(listing)
    listing.set_defaults(run=list_runs)

    def add(name: str, help_text: str, *, by_filter: bool = False) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = actions.add_parser(name, help=help_text)
        sub.add_argument(
            "ids",
            nargs="*" if by_filter else "+",
            metavar="[PROJECT] RUN_ID",
            help="the run (its project is looked up when not given)",
        )
        sub.add_argument("--json", action="store_true", help="JSON instead of a table")
        add_wide(sub)
        sub.set_defaults(run=run)
        return sub

    add("show", "the run's state, its timeline of events and its model calls")
    cancel = add(
        "cancel", "cancel a run that has not finished (or every match of --filter)", by_filter=True
    )
    approve = add("approve", "approve a run waiting for approval (single-use token)")
    reject = add("reject", "reject a run waiting for approval (single-use token)")
    retry = add(
        "retry", "send a FAILED run (or every match of --filter) back to PENDING", by_filter=True
    )
    for sub in (cancel, approve, reject, retry):
        sub.add_argument("--actor", default=None, help="who acts (default: cli:<OS user>)")
    for sub in (cancel, reject):
        sub.add_argument("--reason", default="", help="why (recorded in the event)")
    for sub in (approve, reject):
        sub.add_argument("--token", default=None, help=f"the approval token (or ${TOKEN_ENV})")
    retry.add_argument("--attempts", type=int, default=None, help="extra attempts (default: 3)")
    for sub in (cancel, retry):
        sub.add_argument(
            "--filter",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help=f"every run matching ({', '.join(FILTER_KEYS)}; repeat: all must match)",
        )
        sub.add_argument("--dry-run", action="store_true", help="only the preview: how many runs")
    operation = actions.add_parser("operation", help="a bulk operation's progress; --resume it")
    operation.add_argument("operation_id", help="the operation's id")
    operation.add_argument("--resume", action="store_true", help="run its remaining batches")
    operation.add_argument("--json", action="store_true", help="JSON instead of a table")
    operation.set_defaults(run=show_operation)


def cli_actor() -> str:
    """Who runs this command, as recorded in the metadata of the events it writes."""
    return f"cli:{getpass.getuser()}"


def parse_run_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise InvalidInputError(f"run id {text!r} is not a UUID") from None


def split_ids(ids: list[str]) -> tuple[str | None, uuid.UUID]:
    if len(ids) > 2:
        raise InvalidInputError("expected [PROJECT] RUN_ID")
    return (ids[0] if len(ids) == 2 else None), parse_run_id(ids[-1])


# --- rendering (pure) -------------------------------------------------------------------------


def state_view(state: RunState) -> dict[str, Any]:
    return {
        k: v
        for k, v in msgspec.to_builtins(state).items()
        if k not in ("input", "saga_steps", "result") or v
    }


def state_json(state: RunState) -> str:
    return to_json(state_view(state))


def render_state(state: RunState) -> str:
    view = state_view(state)
    return table(
        ("FIELD", "VALUE"),
        [
            (k, "-" if v is None else v if isinstance(v, str) else to_json(v))
            for k, v in view.items()
        ],
    )


def detail_text(detail: dict[str, Any]) -> str:
    """Pure: an event's detail for the timeline, its ``reason`` first (a requeue, a failure,
    a cancel: why, before the rest)."""
    reason = detail.get("reason")
    rest = {k: v for k, v in detail.items() if k != "reason"}
    parts = [str(reason)] if reason else []
    if rest:
        parts.append(to_json(rest))
    return " ".join(parts)


def render_timeline(lines: list[timeline.TimelineLine], *, wide: bool = False) -> str:
    header = ("VERSION", "AT", "EVENT", "ATTEMPT", "WORKER", "TRACE_ID", "ACTOR", "DETAIL")
    rows = [
        (
            str(ln.version),
            when(ln.at),
            ln.event_type,
            str(ln.attempt),
            ln.worker_id or "-",
            ln.trace_id or "-",
            ln.actor or "-",
            detail_text(ln.detail) if ln.detail else "",
        )
        for ln in lines
    ]
    return table(header, rows, wide=wide)


def hash_cell(body_hash: str | None, *, wide: bool) -> str:
    if body_hash is None:
        return "-"
    return body_hash if wide else model_calls.short_hash(body_hash)


def render_model_calls(calls: list[model_calls.ModelCallLine], *, wide: bool = False) -> str:
    """Pure: a run's model calls as a table (revision ``default``: the default policy; the
    body hash cut to 12 hex digits unless ``wide``)."""
    header = (
        "VERSION",
        "STARTED",
        "ATTEMPT",
        "MODEL",
        "CONTRACT",
        "REVISION",
        "BODY_HASH",
        "DURATION_MS",
        "OUTCOME",
        "TRACE_ID",
        "REASON",
    )
    rows = [
        (
            str(c.version),
            when(c.started_at),
            str(c.attempt),
            c.model or "-",
            f"{c.contract_family}/{c.contract_id}",
            "default" if c.revision_id is None else str(c.revision_id),
            hash_cell(c.body_hash, wide=wide),
            f"{c.duration_ms:.1f}",
            c.outcome,
            c.trace_id or "-",
            c.reason,
        )
        for c in calls
    ]
    return table(header, rows, wide=wide)


def render_runs(
    runs: list[reads.RunSummary],
    blocked: dict[uuid.UUID, BlockedOn | None] | None = None,
    *,
    wide: bool = False,
) -> str:
    header = (
        "RUN_ID",
        "PROJECT",
        "STATUS",
        "BLOCKED_ON",
        "ATTEMPTS",
        "WORKER",
        "FAILURE",
        "CREATED",
        "UPDATED",
    )
    found = blocked or {}
    rows = [
        (
            str(r.run_id),
            r.project_id,
            r.status,
            reason_of(found.get(r.run_id)),
            f"{r.attempt_count}/{r.max_attempts}",
            r.worker_id or "-",
            r.failure_code or "-",
            when(r.created_at),
            when(r.updated_at),
        )
        for r in runs
    ]
    return table(header, rows, wide=wide)


def reason_of(blocked: BlockedOn | None) -> str:
    return "-" if blocked is None else blocked.reason.value


def runs_json(
    runs: list[reads.RunSummary], blocked: dict[uuid.UUID, BlockedOn | None]
) -> list[dict[str, Any]]:
    """Pure: the rows of ``runs list --json``, each with its ``blocked_on`` object."""
    return [
        {**msgspec.to_builtins(r), "blocked_on": msgspec.to_builtins(blocked.get(r.run_id))}
        for r in runs
    ]


@contextlib.asynccontextmanager
async def blocked_decider(settings: Settings) -> AsyncIterator[Decide]:
    """blocked_on of runs (:mod:`awooop.runs.blocked_facts`: one query, and Redis once per
    shard; a Redis that does not answer within REDIS_TIMEOUT_S leaves the Redis facts unknown),
    over one Redis client for as many calls as the block makes (a bulk operation's batches)."""
    redis = redis_client(settings.redis_url, REDIS_TIMEOUT_S)
    keys = Keys(settings.redis_key_prefix, settings.shard_count)

    async def decide(
        conn: Connection, run_ids: list[uuid.UUID]
    ) -> dict[uuid.UUID, BlockedOn | None]:
        return await blocked_facts.blocked_on(conn, redis, keys, run_ids, settings.lease_ttl_s)

    try:
        yield decide
    finally:
        await redis.aclose()


async def blocked_of(
    settings: Settings, conn: Connection, run_ids: list[uuid.UUID]
) -> dict[uuid.UUID, BlockedOn | None]:
    """blocked_on of ``run_ids`` (see :func:`blocked_decider`)."""
    async with blocked_decider(settings) as decide:
        return await decide(conn, run_ids)


# --- list ---------------------------------------------------------------------------------------


async def list_runs(settings: Settings, args: argparse.Namespace) -> int:
    status = None if args.status is None else reads.check_status(args.status)
    reads.check_limit(args.limit)
    db = await Database.open(settings.database_url, max_size=1)
    try:

        async def read(
            conn: Connection,
        ) -> tuple[list[reads.RunSummary], dict[uuid.UUID, BlockedOn | None]]:
            now: datetime = await conn.fetchval("SELECT now()")
            since = None if args.since is None else reads.parse_since(args.since, now)
            runs = await reads.list_runs(
                conn, project_id=args.project, status=status, since=since, limit=args.limit
            )
            return runs, await blocked_of(settings, conn, [r.run_id for r in runs])

        runs, blocked = await db.in_platform(read)
    finally:
        await db.close()
    print(
        to_json(runs_json(runs, blocked))
        if args.json
        else render_runs(runs, blocked, wide=args.wide)
    )
    return 0


# --- one run ------------------------------------------------------------------------------------


async def run(settings: Settings, args: argparse.Namespace) -> int:
    if getattr(args, "filter", None) or (args.action in ("retry", "cancel") and not args.ids):
        return await bulk_action(settings, args)
    project, run_id = split_ids(args.ids)
    who = cli_actor()
    actor = getattr(args, "actor", None) or who
    metadata = {"actor": who}
    token = None
    if args.action in ("approve", "reject"):
        token = args.token or os.environ.get(TOKEN_ENV)
        if not token:
            raise InvalidInputError(f"an approval token is needed: --token or ${TOKEN_ENV}")
    db = await Database.open(settings.database_url, max_size=1)
    try:
        if project is None:
            project = await db.in_platform(lambda conn: reads.project_of(conn, run_id))
            if project is None:
                raise RunNotFoundError(run_id=run_id)

        blocked: BlockedOn | None = None

        async def act(conn: Connection) -> tuple[RunState, model_calls.RunHistory | None]:
            nonlocal blocked
            match args.action:
                case "show":
                    state = await store.load(conn, run_id)
                    if state is None:
                        raise RunNotFoundError(run_id=run_id)
                    blocked = (await blocked_of(settings, conn, [run_id])).get(run_id)
                    return state, await model_calls.history_from_log(conn, run_id)
                case "cancel":
                    state = await control.cancel(
                        conn, run_id, actor=actor, reason=args.reason, metadata=metadata
                    )
                case "approve" | "reject":
                    assert token is not None
                    decision = (
                        approvals.Decision.APPROVED
                        if args.action == "approve"
                        else approvals.Decision.REJECTED
                    )
                    state = await approvals.decide(
                        conn,
                        run_id,
                        token,
                        decision,
                        actor=actor,
                        reason=getattr(args, "reason", ""),
                        metadata=metadata,
                    )
                case "retry":
                    state = await control.retry(
                        conn,
                        run_id,
                        actor=actor,
                        extra_attempts=args.attempts or 3,
                        metadata=metadata,
                    )
                case _:
                    raise InvalidInputError(f"unknown action {args.action}")
            return state, None

        state, history = await db.in_tenant(project, act)
    finally:
        await db.close()
    if history is not None:
        if args.json:
            view = {
                "state": state_view(state),
                "blocked_on": blocked,
                "timeline": history.timeline,
                "model_calls": history.model_calls,
            }
            print(to_json(view))
        else:
            print(f"blocked_on: {describe(blocked)}")
            print()
            print(render_state(state))
            print()
            print(render_timeline(history.timeline, wide=args.wide))
            print()
            print(f"model calls: {len(history.model_calls)}")
            if history.model_calls:
                print(render_model_calls(history.model_calls, wide=args.wide))
    else:
        print(state_json(state) if args.json else render_state(state))
    return 0


# --- by filter: one operation -------------------------------------------------------------------


def filter_fields(pairs: list[str]) -> dict[str, str]:
    """Pure: ``--filter KEY=VALUE`` options as fields (E-INPUT-001 for an unknown key)."""
    fields: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in listing.FILTER_KEYS:
            known = ", ".join(listing.FILTER_KEYS)
            raise InvalidInputError(
                f"--filter {pair[:60]!r}: expected KEY=VALUE, KEY one of {known}"
            )
        fields[key] = value
    return fields


def render_operation(op: bulk.Operation) -> str:
    view = {k: v for k, v in msgspec.to_builtins(op).items() if k not in ("errors",)}
    rows = [
        (k, "-" if v is None else v if isinstance(v, str) else to_json(v)) for k, v in view.items()
    ]
    rows += [("refused run", f"{e['run_id']} {e['code']} {e['message']}") for e in op.errors]
    return table(("FIELD", "VALUE"), rows)


def progress_line(op: bulk.Operation) -> str:
    done = "retried" if op.kind == "retry" else "cancelled"
    return (
        f"batch {op.batches}: {op.scanned} of {op.expected} looked at, "
        f"{op.changed} {done}, {op.refused} refused"
    )


async def execute_with_progress(db: Database, op: bulk.Operation, decide: Decide) -> bulk.Operation:
    """Run an operation's remaining batches, a progress line on stderr after each."""
    return await bulk.execute(
        db,
        op.project_id,
        op.operation_id,
        decide,
        lambda o: print(progress_line(o), file=sys.stderr),
    )


async def bulk_action(settings: Settings, args: argparse.Namespace) -> int:
    if args.ids:
        raise InvalidInputError("give either [PROJECT] RUN_ID or --filter, not both")
    if not args.filter:
        raise InvalidInputError("expected [PROJECT] RUN_ID or --filter KEY=VALUE")
    fields = filter_fields(args.filter)
    who = cli_actor()
    db = await Database.open(settings.database_url, max_size=2)
    try:
        async with blocked_decider(settings) as decide:
            return await _bulk_action(db, decide, fields, who, args)
    finally:
        await db.close()


async def _bulk_action(
    db: Database, decide: Decide, fields: dict[str, str], who: str, args: argparse.Namespace
) -> int:
    now: datetime = await db.in_platform(lambda conn: conn.fetchval("SELECT now()"))
    f = listing.parse_filter(fields, now)
    if f.project is not None:
        check_project_id(f.project)

    async def count(conn: Connection) -> bulk.Preview:
        return await bulk.preview(conn, args.action, f, decide)

    if f.project is not None:
        preview = await db.in_tenant(f.project, count)
    else:
        preview = await db.in_platform(count)
    if args.json and args.dry_run:
        print(to_json(preview))
        return 0
    print(f"{preview.total} run(s) to {args.action}{'' if preview.exact else ' at least'}")
    if preview.by_project:
        print(table(("PROJECT", "RUNS"), [(p, str(n)) for p, n in preview.by_project.items()]))
    if args.dry_run or preview.total == 0:
        return 0

    async def create(conn: Connection) -> bulk.Operation:
        return await bulk.create(
            conn,
            args.action,
            f,
            actor=who,
            via="cli",
            expected=preview.total,
            person=args.actor,
            extra_attempts=getattr(args, "attempts", None) or 3,
            reason=getattr(args, "reason", ""),
        )

    op = await bulk.in_scope(db, bulk.scope_of(f), create)
    print(f"operation {op.operation_id}", file=sys.stderr)
    final = await execute_with_progress(db, op, decide)
    done = "retried" if final.kind == "retry" else "cancelled"
    print(
        to_json(final)
        if args.json
        else f"operation {final.operation_id} {final.state}: {final.changed} {done}, "
        f"{final.refused} refused"
    )
    return 0


async def show_operation(settings: Settings, args: argparse.Namespace) -> int:
    try:
        operation_id = uuid.UUID(args.operation_id)
    except ValueError:
        raise InvalidInputError(f"operation id {args.operation_id!r} is not a UUID") from None
    db = await Database.open(settings.database_url, max_size=2)
    try:
        op = await db.in_platform(lambda conn: bulk.get(conn, operation_id))
        if args.resume and op.state == "running":
            async with blocked_decider(settings) as decide:
                op = await execute_with_progress(db, op, decide)
    finally:
        await db.close()
    print(to_json(op) if args.json else render_operation(op))
    return 0
