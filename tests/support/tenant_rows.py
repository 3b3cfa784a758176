"""Rows of one project in every tenant table, for the row-level security tests (R-43).

:func:`seed_project` writes one project's rows through the real write paths where they exist
(a run through ``awooop.runs.run_rows``) and plain inserts elsewhere. A table that has a
``project_id`` column and none of these rows gets a generic row built from its column types;
a table whose constraints refuse that row needs a builder here (the RLS test says which).
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

from awooop.core.db import Connection, Database
from awooop.eventlog import deadletters
from awooop.eventlog.runs import create_run
from awooop.ingest import auth, credentials
from awooop.llm import flow_store
from awooop.runs import approvals, bulk, concurrency, leases, listing, pauses, versions
from awooop.runs.pause_rules import Scope
from tests.support import factories

# --- builders: one project's rows, through the write paths --------------------------------------


async def _run(conn: Connection, project_id: str) -> None:
    now = await conn.fetchval("SELECT now()")
    await create_run(conn, factories.created(project_id=project_id, at=now))


async def _dedupe(conn: Connection, project_id: str) -> None:
    await conn.execute(
        "INSERT INTO awooop_channel_event_dedupe "
        "(project_id, channel_type, provider_event_id, window_start, run_id, expires_at) "
        "VALUES ($1, 'api', $2, awooop_dedupe_window(now()), $3, now() + interval '1 day')",
        project_id,
        uuid.uuid4().hex,
        uuid.uuid4(),
    )


async def _revision(conn: Connection, project_id: str) -> None:
    body = {"prompt": f"hello {project_id}"}
    contract = f"c-{uuid.uuid4().hex[:8]}"
    revision_id = await conn.fetchval(
        "INSERT INTO awooop_contract_revisions "
        "(project_id, contract_family, contract_id, body, body_hash) "
        "VALUES ($1, 'agent', $4, $2, $3) RETURNING revision_id",
        project_id,
        body,
        hashlib.sha256(repr(body).encode()).hexdigest(),
        contract,
    )
    await conn.execute(
        "INSERT INTO awooop_active_revisions "
        "(project_id, contract_family, contract_id, active_revision_id) "
        "VALUES ($1, 'agent', $3, $2)",
        project_id,
        revision_id,
        contract,
    )
    await conn.execute(
        "INSERT INTO awooop_contract_outbox "
        "(event_type, project_id, contract_family, contract_id, new_revision_id) "
        "VALUES ('RevisionActivated', $1, 'agent', $3, $2)",
        project_id,
        revision_id,
        contract,
    )


async def _heartbeat(conn: Connection, project_id: str) -> None:
    await conn.execute(
        "INSERT INTO awooop_loop_heartbeats "
        "(loop_name, project_id, category, interval_s, host, pid) "
        "VALUES ($2, $1, 'per-tenant', 1, 'test', 1)",
        project_id,
        f"rls_probe_{uuid.uuid4().hex[:8]}",
    )


async def _channel_credentials(conn: Connection, project_id: str) -> None:
    """A channel secret and a bearer token, with the statements awooop.ingest.credentials uses
    (on the platform role, as it does: no tenant role writes credentials, migration 0090)."""
    await conn.execute(credentials.UPSERT_SECRET, project_id, "telegram", "rls-probe-secret")
    token_id, _, token_hash = auth.new_token()
    await conn.execute(
        credentials.INSERT_TOKEN, token_id, project_id, credentials.INGEST_SCOPE, "api", token_hash
    )


async def _approval(conn: Connection, project_id: str) -> None:
    """A run waiting for approval, through the worker's write path (claim, then request)."""
    now = await conn.fetchval("SELECT now()")
    state = await create_run(conn, factories.created(project_id=project_id, at=now))
    await leases.claim(conn, state.run_id, "rls-probe", 30)
    await approvals.request(conn, state.run_id, "rls-probe", 1, name="probe", reason="", ttl_s=60)


async def _projections(conn: Connection, project_id: str) -> None:
    """Read-model rows (projections/), written by the projections' own apply."""
    from awooop.core.events import RevisionCreated, revision_stream_id, run_stream_id
    from awooop.projections.base import LIVE, LogEvent
    from awooop.projections.registry import get

    now = await conn.fetchval("SELECT now()")
    run = factories.created(project_id=project_id, at=now)
    contract = f"c-{uuid.uuid4().hex[:8]}"
    revision = RevisionCreated(
        at=now,
        revision_id=uuid.uuid4(),
        contract_family="agent",
        contract_id=contract,
        body_hash="h",
    )
    for name, stream_id, event in (
        ("run_state_view", run_stream_id(run.run_id), run),
        ("run_timeline", run_stream_id(run.run_id), run),
        ("revision_history", revision_stream_id(project_id, "agent", contract), revision),
    ):
        log_event = LogEvent(
            stream_id=stream_id,
            version=1,
            project_id=project_id,
            position=1,
            event_type=type(event).__name__,
            event=event,
        )
        await get(name).apply(conn, LIVE, {stream_id: [log_event]})


async def _operation(conn: Connection, project_id: str) -> None:
    """A bulk operation of the project, through its write path (nothing run yet)."""
    await bulk.create(
        conn,
        "retry",
        listing.RunFilter(project=project_id),
        actor="rls-probe",
        via="cli",
        expected=0,
    )


async def _dead_letter(conn: Connection, project_id: str) -> None:
    """A dead letter of a run of the project, through the one function that records them."""
    now = await conn.fetchval("SELECT now()")
    run = await create_run(conn, factories.created(project_id=project_id, at=now))
    dead = deadletters.DeadLetterRecord(
        project_id=project_id,
        run_id=run.run_id,
        run_version=run.version + 1,
        source=deadletters.WORK,
        reason="rls-probe",
    )
    await deadletters.record(conn, dead)


async def _pause(conn: Connection, project_id: str) -> None:
    await pauses.pause(
        conn, project_id, Scope.CHANNEL, "telegram", reason="rls-probe", actor="rls-probe"
    )


async def _concurrency_limit(conn: Connection, project_id: str) -> None:
    await concurrency.set_limit(
        conn,
        project_id,
        Scope.CONTRACT,
        "rls-probe",
        key_expr="input.customer",
        max_expr="2",
        global_max=None,
        depth_cap=None,
        actor="rls-probe",
    )


async def _handler_versions(conn: Connection, project_id: str) -> None:
    await versions.require(conn, project_id, "rls-probe", ["v1", "v2"], actor="rls-probe")


async def _schedule(conn: Connection, project_id: str) -> None:
    """A schedule of the project, through its write path (awooop.schedules.store)."""
    from datetime import UTC, datetime

    from awooop.schedules import rules, store

    definition = rules.define(
        cron_text="30 2 * * *", timezone="Europe/Madrid", contract_id="rls-probe", input={}
    )
    await store.create(
        conn, project_id, definition, actor="rls-probe", now=datetime.now(UTC), limit=10
    )


async def _llm_flow(conn: Connection, project_id: str) -> None:
    """A rate limit, a price and a budget, a call's reservation on the budget's counter and a
    wait, through the flow-control write paths (awooop.llm.flow_store, awooop.llm.admission)."""
    from awooop.llm.admission import ADD, ENSURE, RESERVE, WAIT_SET
    from awooop.llm.flow_rules import OnExceed

    await flow_store.set_limit(
        conn, project_id, "", limit=10, period_s=1.0, burst=None, actor="rls-probe"
    )
    await flow_store.set_budget(
        conn,
        project_id,
        "",
        tokens=100,
        period_s=3600,
        reserve_tokens=5,
        on_exceed=OnExceed.WAIT,
        actor="rls-probe",
    )
    await flow_store.set_price(
        conn, project_id, "m", input_price="0.5", output_price="1.5", actor="rls-probe"
    )
    now = await conn.fetchval("SELECT now()")
    run = await create_run(conn, factories.created(project_id=project_id, at=now))
    period = await conn.fetchrow(ENSURE, project_id, "", 3600, "tokens")
    await conn.fetchrow(RESERVE, project_id, "", 3600, period["start"], 5, 100, "tokens")
    await conn.execute(ADD, run.run_id, 1, 1, "", project_id, 3600, period["start"], 5, "tokens")
    await conn.execute(
        WAIT_SET, run.run_id, project_id, 1, "over_budget", "awooop_llm:p", "", period["period_end"]
    )


async def _run_output(conn: Connection, project_id: str) -> None:
    """A chunk of a run's streamed output, through the worker's fenced append (its claim
    first; the append statement reads the lease row, which the tenant sees)."""
    from awooop.runs import output_log

    now = await conn.fetchval("SELECT now()")
    state = await create_run(conn, factories.created(project_id=project_id, at=now))
    await leases.claim(conn, state.run_id, "rls-probe", 30)
    found = await output_log.append(
        conn, state.run_id, "rls-probe", 1, "probe", 5, truncated=False, max_bytes=100
    )
    assert found.written == 1


async def _waits(conn: Connection, project_id: str) -> None:
    """A run's open sleep and a signal kept for it (the rows durable waits write)."""
    now = await conn.fetchval("SELECT now()")
    state = await create_run(conn, factories.created(project_id=project_id, at=now))
    await conn.execute(
        "INSERT INTO awooop_run_waits (run_id, project_id, step, kind, due_at, started_at) "
        "VALUES ($1, $2, 'sleep:1', 'sleep', now() + interval '1 hour', now())",
        state.run_id,
        project_id,
    )
    await conn.execute(
        "INSERT INTO awooop_signals (signal_id, project_id, run_id, name, signal_key, sent_by) "
        "VALUES ($1, $2, $3, 'probe', 'k1', 'rls-probe')",
        uuid.uuid4(),
        project_id,
        state.run_id,
    )


BUILDERS = (
    _run,
    _dedupe,
    _revision,
    _heartbeat,
    _channel_credentials,
    _approval,
    _projections,
    _operation,
    _dead_letter,
    _pause,
    _concurrency_limit,
    _handler_versions,
    _schedule,
    _llm_flow,
    _run_output,
    _waits,
)


# Builders of tables that only the platform role writes.
PLATFORM_BUILDERS = frozenset({_channel_credentials})


async def seed_project(db: Database, project_id: str) -> None:
    """Rows of ``project_id`` in every tenant table a builder knows, as that tenant (or, for
    the credential tables, on the platform role, the only one that writes them)."""
    for build in BUILDERS:
        if build in PLATFORM_BUILDERS:
            async with db.platform_writes() as conn:
                await build(conn, project_id)
            continue
        async with db.tenant(project_id) as conn:
            await build(conn, project_id)


# --- generic rows for tables no builder knows -----------------------------------------------------

COLUMNS = """
SELECT a.attname AS name, format_type(a.atttypid, a.atttypmod) AS type,
       a.attnotnull AS not_null, a.atthasdef AS has_default,
       a.attidentity <> '' AS identity, a.attgenerated <> '' AS generated
FROM pg_attribute a
WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""

SAMPLE_TEXT = {
    "uuid": lambda: str(uuid.uuid4()),
    "integer": lambda: "1",
    "bigint": lambda: "1",
    "smallint": lambda: "1",
    "double precision": lambda: "1",
    "real": lambda: "1",
    "numeric": lambda: "1",
    "boolean": lambda: "false",
    "jsonb": lambda: "{}",
    "json": lambda: "{}",
    "timestamp with time zone": lambda: "now",
    "timestamp without time zone": lambda: "now",
    "date": lambda: "today",
    "xid8": lambda: "1",
    "bytea": lambda: "\\x00",
}


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


async def insert_generic(conn: Connection, table: str, project_id: str) -> None:
    """One row of ``table`` for ``project_id``: required columns from their types."""
    names: list[str] = []
    values: list[str] = []
    types: list[str] = []
    for col in await conn.fetch(COLUMNS, table):
        if col["generated"] or col["identity"]:
            continue
        if col["name"] == "project_id":
            value = project_id
        elif col["not_null"] and not col["has_default"]:
            make = SAMPLE_TEXT.get(col["type"])
            value = make() if make else f"{project_id}-{uuid.uuid4().hex[:12]}"
        else:
            continue
        names.append(quote_ident(col["name"]))
        values.append(value)
        types.append(col["type"])
    placeholders = ", ".join(f"${i}::text::{t}" for i, t in enumerate(types, start=1))
    await conn.execute(
        f"INSERT INTO {quote_ident(table)} ({', '.join(names)}) VALUES ({placeholders})",
        *values,
    )


# --- copying a row (to try writing another project's row) -----------------------------------------


async def insertable_columns(conn: Connection, table: str) -> list[str]:
    return [
        str(c["name"])
        for c in await conn.fetch(COLUMNS, table)
        if not c["generated"] and not c["identity"]
    ]


async def one_row(conn: Connection, table: str, project_id: str) -> dict[str, Any]:
    row = await conn.fetchval(
        f"SELECT to_jsonb(t) FROM {quote_ident(table)} t WHERE project_id = $1 LIMIT 1",
        project_id,
    )
    assert isinstance(row, dict), f"{table} has no row of {project_id}"
    return row


async def insert_copy(conn: Connection, table: str, row: dict[str, Any], columns: list[str]) -> str:
    cols = ", ".join(quote_ident(c) for c in columns)
    status: str = await conn.execute(
        f"INSERT INTO {quote_ident(table)} ({cols}) "
        f"SELECT {cols} FROM jsonb_populate_record(NULL::{quote_ident(table)}, $1::jsonb)",
        row,
    )
    return status
