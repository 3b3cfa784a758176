"""``awooop runs``: what each action does (list, show, cancel, approve, reject, retry, by one
run id or ``--filter`` as one bulk operation, and ``operation``), over a database opened for
the command; :mod:`awooop.commands.runs` declares the options, :mod:`awooop.commands.runs_render`
prints."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import datetime

import msgspec

from awooop.commands.output import table, to_json
from awooop.commands.runs_parsing import (
    TOKEN_ENV,
    cli_actor,
    edited_payload,
    filter_fields,
    split_ids,
)
from awooop.commands.runs_render import (
    progress_line,
    render_attempts,
    render_call_texts,
    render_failures,
    render_family,
    render_model_calls,
    render_operation,
    render_runs,
    render_state,
    render_timeline,
    runs_json,
    state_json,
    state_view,
    tokens_line,
)
from awooop.core.config import Settings
from awooop.core.db import Connection, Database
from awooop.core.errors import InvalidInputError, RunNotFoundError
from awooop.eventlog.state import RunState, RunStatus
from awooop.ingest.credentials import check_project_id
from awooop.projections import model_calls, timeline
from awooop.runs import (
    approvals,
    blocked_facts,
    bulk,
    children,
    control,
    listing,
    reads,
    run_rows,
    search,
)
from awooop.runs.blocked import BlockedOn, describe
from awooop.runs.listing import Decide
from awooop.services import redis_client
from awooop.streams.keys import Keys

REDIS_TIMEOUT_S = 3.0  # blocked_on asks Redis about readers and dead letters; never hang on it


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


# --- list --------------------------------------------------------------------------------------


async def list_runs(settings: Settings, args: argparse.Namespace) -> int:
    status = None if args.status is None else reads.check_status(args.status)
    reads.check_limit(args.limit)
    if args.search is not None:
        search.check_search(args.search)
    db = await Database.open(settings.database_url, max_size=1)
    try:

        async def read(
            conn: Connection,
        ) -> tuple[list[reads.RunSummary], dict[uuid.UUID, BlockedOn | None]]:
            now: datetime = await conn.fetchval("SELECT now()")
            since = None if args.since is None else reads.parse_since(args.since, now)
            if args.search is not None:
                runs = await searched_runs(
                    conn, args.project, status, since, args.search, args.limit
                )
            else:
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


async def searched_runs(
    conn: Connection,
    project: str | None,
    status: RunStatus | None,
    since: datetime | None,
    text: str,
    limit: int,
) -> list[reads.RunSummary]:
    """The runs ``--search`` finds with the other filters, newest created first."""
    f = listing.RunFilter(
        project=project, status=status, since=since, search=search.check_search(text)
    )
    fields = reads.RunSummary.__struct_fields__
    return [
        reads.RunSummary(**{k: getattr(r, k) for k in fields})
        for r in await listing.rows(conn, f, None, limit)
    ]


# --- one run ------------------------------------------------------------------------------------


async def run(settings: Settings, args: argparse.Namespace) -> int:
    if getattr(args, "filter", None) or (args.action in ("retry", "cancel") and not args.ids):
        return await bulk_action(settings, args)
    project, run_id = split_ids(args.ids)
    who = cli_actor()
    actor = getattr(args, "actor", None) or who
    metadata = {"actor": who}
    token = None
    person = getattr(args, "by", None)
    limit = settings.step_result_max_bytes
    edited = edited_payload(getattr(args, "payload_file", None), limit)
    if args.action in ("approve", "reject"):
        token = args.token or os.environ.get(TOKEN_ENV)
        if person is not None and args.token:
            raise InvalidInputError("give either --token or --by, not both")
        if person is None and not token:
            raise InvalidInputError(
                f"an approval token is needed: --token or ${TOKEN_ENV}, or --by NAME"
            )
    db = await Database.open(settings.database_url, max_size=1)
    try:
        if project is None:
            project = await db.in_platform(lambda conn: reads.project_of(conn, run_id))
            if project is None:
                raise RunNotFoundError(run_id=run_id)

        blocked: BlockedOn | None = None
        family: children.Family | None = None

        async def act(conn: Connection) -> tuple[RunState, model_calls.RunHistory | None]:
            nonlocal blocked, family
            match args.action:
                case "show":
                    state = await run_rows.load(conn, run_id)
                    if state is None:
                        raise RunNotFoundError(run_id=run_id)
                    blocked = (await blocked_of(settings, conn, [run_id])).get(run_id)
                    family = await children.family(conn, run_id, state.parent_run_id)
                    return state, await model_calls.history_from_log(conn, run_id)
                case "cancel":
                    state = await control.cancel(
                        conn, run_id, actor=actor, reason=args.reason, metadata=metadata
                    )
                case "approve" | "reject":
                    decision = (
                        approvals.Decision.APPROVED
                        if args.action == "approve"
                        else approvals.Decision.REJECTED
                    )
                    if person is not None:
                        state = await approvals.decide_as(
                            conn,
                            run_id,
                            decision,
                            actor=actor,
                            by=person,
                            reason=getattr(args, "reason", ""),
                            metadata=metadata,
                            payload=edited,
                            payload_max_bytes=limit,
                        )
                        return state, None
                    assert token is not None
                    state = await approvals.decide(
                        conn,
                        run_id,
                        token,
                        decision,
                        actor=actor,
                        reason=getattr(args, "reason", ""),
                        metadata=metadata,
                        payload=edited,
                        payload_max_bytes=limit,
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
        steps = timeline.steps_in_run_order(state.saga_steps, history.timeline)
        state = msgspec.structs.replace(state, saga_steps=steps)
        if args.json:
            view = {
                "state": state_view(state),
                "blocked_on": blocked,
                "family": family,
                "timeline": history.timeline,
                "model_calls": history.model_calls,
                "tokens": history.tokens,
                "failures": history.failures,
                "attempts": history.attempts,
            }
            print(to_json(view))
        else:
            print(f"blocked_on: {describe(blocked)}")
            print()
            print(render_state(state))
            if family is not None and (family.parent_run_id or family.children_total):
                print()
                print(render_family(family))
            if history.attempts:
                print()
                print(f"attempts: {len(history.attempts)}")
                print(render_attempts(history.attempts, wide=args.wide))
            if history.failures:
                print()
                print(f"failures: {len(history.failures)}")
                print(render_failures(history.failures))
            print()
            print(render_timeline(history.timeline, wide=args.wide))
            print()
            print(f"model calls: {len(history.model_calls)}")
            if history.model_calls:
                print(tokens_line(history.tokens))
                print(render_model_calls(history.model_calls, wide=args.wide))
                texts = render_call_texts(history.model_calls)
                if texts:
                    print(texts)
    else:
        print(state_json(state) if args.json else render_state(state))
    return 0


# --- by filter: one operation -------------------------------------------------------------------


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
    if preview.by_code:
        codes = [(c or "-", str(n)) for c, n in preview.by_code.items()]
        print(table(("FAILURE CODE", "RUNS"), codes))
    if preview.capped:
        print("the search matches more runs than it looks at: narrow it to reach the others")
    if args.dry_run or preview.total == 0:
        return 0
    bulk.check_bounded(preview)

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
