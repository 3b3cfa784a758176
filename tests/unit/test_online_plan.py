"""Online migrations' pure decisions: which statement becomes which step, batch sizes, retries."""

from __future__ import annotations

import pytest

from awooop.core.errors import ConfigError
from awooop.core.online_migrations import rows_changed
from awooop.core.online_plan import (
    Kind,
    Policy,
    Progress,
    is_online,
    next_batch_size,
    partition_index_name,
    plan,
    retry_delay,
    split_statements,
)

POLICY = Policy()


def test_the_mark_counts_only_in_the_comments_that_open_the_file() -> None:
    assert is_online("-- awooop: online\nALTER TABLE t VALIDATE CONSTRAINT c;\n")
    assert is_online("--awooop:online\n")
    assert is_online("-- A migration.\n\n-- awooop: online\nSELECT 1;\n")
    assert not is_online("SELECT 1;\n-- awooop: online\n")
    assert not is_online("-- not awooop: online\nCREATE TABLE t (a int);\n")
    assert not is_online("CREATE TABLE t (a int);\n")


def test_statements_split_at_semicolons_outside_literals_and_comments() -> None:
    sql = """
    -- a comment; with a semicolon
    UPDATE t SET note = 'a; b' WHERE id IN (SELECT id FROM t WHERE note IS NULL LIMIT $1);
    /* block; comment */ CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1; $$;
    SELECT '$1', $$ $1 $$, $10
    """
    statements = split_statements(sql)
    assert [batch for _, batch in statements] == [True, False, False]
    assert statements[0][0].startswith("UPDATE t SET note = 'a; b'")
    assert "SELECT 1; $$" in statements[1][0]
    assert "comment" not in " ".join(text for text, _ in statements)


def test_each_statement_becomes_the_step_of_its_shape() -> None:
    steps = plan(
        "0999_x.sql",
        """-- awooop: online
        ALTER TABLE t ADD CONSTRAINT t_a CHECK (a > 0) NOT VALID;
        CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS t_a_idx ON ONLY t (a, b) WHERE a > 0;
        UPDATE t SET b = 0 WHERE ctid = ANY (ARRAY(SELECT ctid FROM t WHERE b IS NULL LIMIT $1));
        ALTER TABLE t VALIDATE CONSTRAINT t_a;
        DROP INDEX CONCURRENTLY IF EXISTS t_old_idx;
        """,
    )
    assert [s.kind for s in steps] == [
        Kind.TRANSACTION,
        Kind.INDEX,
        Kind.BATCH,
        Kind.VALIDATE,
        Kind.AUTOCOMMIT,
    ]
    assert [s.number for s in steps] == [1, 2, 3, 4, 5]
    index = steps[1]
    assert (index.table, index.name, index.unique) == ("t", "t_a_idx", True)
    assert index.index_sql("t_a_idx_p1", "t_p1", only=False, concurrently=True) == (
        "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS t_a_idx_p1 ON t_p1(a,b)WHERE a>0"
    )
    assert index.index_sql("t_a_idx", "t", only=True, concurrently=False) == (
        "CREATE UNIQUE INDEX IF NOT EXISTS t_a_idx ON ONLY t(a,b)WHERE a>0"
    )
    assert steps[2].table == "t"
    assert (steps[3].table, steps[3].name) == ("t", "t_a")


def test_a_batch_must_write_rows() -> None:
    with pytest.raises(ConfigError, match="statement 1 uses \\$1"):
        plan("0999_x.sql", "-- awooop: online\nSELECT * FROM t LIMIT $1;\n")


def test_a_concurrent_index_it_cannot_read_is_refused_not_run_in_a_transaction() -> None:
    with pytest.raises(ConfigError, match="statement 1"):
        plan("0999_x.sql", '-- awooop: online\nCREATE INDEX CONCURRENTLY "Odd" ON t (a);\n')


def test_partition_index_names_fit_postgres_and_differ_per_partition() -> None:
    assert (
        partition_index_name("awooop_events_kind_idx", "awooop_events", "awooop_events_p20261130")
        == "awooop_events_kind_idx_p20261130"
    )
    long_names = {
        partition_index_name("x" * 70, "awooop_events", f"awooop_events_p2026113{d}")
        for d in range(5)
    }
    assert len(long_names) == 5 and all(len(n) <= 63 for n in long_names)
    assert partition_index_name("i", "t", "other") == "i_other"


@pytest.mark.parametrize(
    ("size", "elapsed", "expected"),
    [
        (1_000, 0.01, 2_000),  # well under the target: double
        (1_000, 0.2, 1_000),  # near it: keep
        (1_000, 0.9, 500),  # over it: halve
        (8_000, 0.01, POLICY.max_batch),  # never above the bound
        (150, 5.0, POLICY.min_batch),  # never below it
    ],
)
def test_batch_size_follows_how_long_the_last_batch_took(
    size: int, elapsed: float, expected: int
) -> None:
    assert next_batch_size(size, elapsed, POLICY) == expected


def test_retries_back_off_up_to_a_cap_and_then_give_up() -> None:
    delays = [retry_delay(a, POLICY, jitter=0.999) for a in range(1, POLICY.attempts)]
    assert all(d is not None for d in delays)
    values = [d for d in delays if d is not None]
    assert values[0] < values[3] < values[10]
    assert max(values) <= POLICY.backoff_cap_s
    assert retry_delay(1, POLICY, jitter=0.0) == pytest.approx(POLICY.backoff_first_s / 2)
    assert retry_delay(POLICY.attempts, POLICY, jitter=0.5) is None


def test_progress_reports_rate_and_never_more_than_all() -> None:
    fields = Progress(done=500, total=1_000, elapsed_s=2.0).fields()
    assert fields == {
        "rows_done": 500,
        "rows_estimated": 1_000,
        "percent": 50.0,
        "rows_per_s": 250,
        "eta_s": 2.0,
    }
    over = Progress(done=1_200, total=1_000, elapsed_s=1.0).fields()
    assert over["percent"] == 100.0 and over["rows_estimated"] == 1_200
    assert Progress(done=0, total=0, elapsed_s=0.0).fields()["percent"] == 100.0


@pytest.mark.parametrize(
    ("tag", "rows"), [("UPDATE 12", 12), ("INSERT 0 7", 7), ("DELETE 0", 0), ("SELECT", 0)]
)
def test_rows_changed_reads_the_command_tag(tag: str, rows: int) -> None:
    assert rows_changed(tag) == rows
