"""The tables SPEC.md names, with the columns it lists (R-01, R-11, R-20): the migrations may
add columns, never leave one out."""

from __future__ import annotations

import pytest

from awooop.core.db import Database

SPEC_COLUMNS = {
    "awooop_channel_event_dedupe": {
        "dedupe_id",
        "project_id",
        "channel_type",
        "provider_event_id",
        "run_id",
        "created_at",
    },
    "awooop_run_state": {
        "lease_until",
        "heartbeat_at",
        "attempt_count",
        "worker_id",
        "reaped_at",
        "failure_reason",
        "saga_steps",
    },
    "awooop_contract_revisions": {
        "revision_id",
        "project_id",
        "contract_family",
        "contract_id",
        "body",
        "body_hash",
        "created_at",
    },
    "awooop_active_revisions": {"project_id", "contract_family", "contract_id"},
    "awooop_contract_outbox": {
        "event_id",
        "event_type",
        "project_id",
        "contract_family",
        "contract_id",
        "old_revision_id",
        "new_revision_id",
        "created_at",
        "delivered_at",
        "relay_attempts",
    },
}


@pytest.mark.parametrize("table", sorted(SPEC_COLUMNS))
async def test_each_table_has_the_columns_spec_lists(db: Database, table: str) -> None:
    async with db.platform() as conn:
        columns = {
            r["column_name"]
            for r in await conn.fetch(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_schema = 'public' AND table_name = $1",
                table,
            )
        }
    assert SPEC_COLUMNS[table] <= columns, SPEC_COLUMNS[table] - columns


async def test_the_idempotency_key_is_unique_within_each_dedupe_window(db: Database) -> None:
    # Partitioned by window, Postgres keeps a key unique per window; a first delivery claims
    # its key in two windows (test_ingest_windows.py checks the races this closes).
    assert await unique_on(db, "awooop_channel_event_dedupe") >= {
        ("project_id", "channel_type", "provider_event_id", "window_start")
    }


async def test_undelivered_outbox_rows_have_a_partial_index(db: Database) -> None:
    async with db.platform() as conn:
        predicates = [
            r["predicate"]
            for r in await conn.fetch(
                "SELECT pg_get_expr(i.indpred, i.indrelid) AS predicate FROM pg_index i "
                "WHERE i.indrelid = 'awooop_contract_outbox'::regclass AND i.indpred IS NOT NULL"
            )
        ]
    assert "(delivered_at IS NULL)" in predicates


async def unique_on(db: Database, table: str) -> set[tuple[str, ...]]:
    """The column lists of the unique indexes (and constraints) of ``table``."""
    async with db.platform() as conn:
        rows = await conn.fetch(
            "SELECT array_agg(a.attname ORDER BY k.n) AS columns FROM pg_index i "
            "CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
            "WHERE i.indrelid = $1::regclass AND i.indisunique GROUP BY i.indexrelid",
            table,
        )
    return {tuple(r["columns"]) for r in rows}
