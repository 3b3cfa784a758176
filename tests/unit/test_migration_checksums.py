"""What a migration's checksum covers, and which recorded checksums a file accepts."""

from __future__ import annotations

from pathlib import Path

import pytest

from awooop.core.errors import ConfigError
from awooop.core.migration_checksums import (
    Recorded,
    accepted_by_file,
    load_released,
    normalise_sql,
    normalised_checksum,
    raw_checksum,
    recorded_is_released,
    unreleased_message,
)

BODY = "CREATE TABLE t (\n    a int,  -- the key\n    b text\n);\n"


def test_comments_and_whitespace_outside_literals_do_not_count() -> None:
    reworded = "-- A table.\nCREATE   TABLE t (a int, /* old key */\n\tb text);"
    assert normalise_sql(BODY) == normalise_sql(reworded) == "CREATE TABLE t(a int,b text);"
    assert normalised_checksum(BODY) == normalised_checksum(reworded)
    assert raw_checksum(BODY) != raw_checksum(reworded)


def test_a_changed_statement_counts() -> None:
    assert normalised_checksum(BODY) != normalised_checksum(BODY.replace("b text", "b jsonb"))
    assert normalise_sql("SELECT a FROM t") != normalise_sql("SELECT aFROM t")


@pytest.mark.parametrize(
    ("sql", "kept"),
    [
        ("SELECT '-- not a comment' , 1", "'-- not a comment'"),
        ("SELECT 'it''s  -- still a string'", "'it''s  -- still a string'"),
        ("SELECT E'\\'  -- inside an escape string'", "E'\\'  -- inside an escape string'"),
        ('SELECT 1 AS "a  -- quoted name"', '"a  -- quoted name"'),
        (
            "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1 -- kept\n  $$;",
            "$$ SELECT 1 -- kept\n  $$",
        ),
        (
            "DO $body$ BEGIN PERFORM '$$'; -- kept\nEND $body$",
            "$body$ BEGIN PERFORM '$$'; -- kept\nEND $body$",
        ),
        ("SELECT '/*  not a comment */'", "'/*  not a comment */'"),
    ],
)
def test_literals_and_dollar_quoted_bodies_are_kept_byte_for_byte(sql: str, kept: str) -> None:
    assert kept in normalise_sql(sql)


def test_dollar_signs_that_open_no_quote_are_plain_text() -> None:
    sql = "SELECT $1, a$b FROM t -- gone"
    assert normalise_sql(sql) == "SELECT $1,a$b FROM t"


def test_nested_block_comments_are_dropped_whole() -> None:
    assert normalise_sql("SELECT /* a /* b */ c */ 1") == "SELECT 1"


def test_a_recorded_checksum_is_accepted_if_some_release_shipped_it() -> None:
    old = BODY.replace("the key", "the old key")
    accepted = {"0001_t.sql": frozenset({raw_checksum("listed")})}

    def released(recorded: Recorded, name: str = "0001_t.sql") -> bool:
        return recorded_is_released(name, BODY, recorded, accepted)

    assert released(Recorded(raw_checksum(BODY), normalised_checksum(BODY)))
    assert released(Recorded(raw_checksum(old), normalised_checksum(old)))  # comments edited
    assert released(Recorded(raw_checksum(BODY), None))  # a release before normalisation
    assert released(Recorded(raw_checksum("listed"), None))
    # A raw checksum of a version nobody listed is refused, even if only a comment differs:
    # the migrator cannot see that version's text.
    assert not released(Recorded(raw_checksum(old), None))
    assert not released(Recorded(raw_checksum("listed"), None), name="0002_u.sql")
    assert not released(Recorded(raw_checksum(BODY + ";"), normalised_checksum(BODY + ";")))


def test_released_toml_entries_are_checked(tmp_path: Path) -> None:
    assert load_released(tmp_path) == []
    (tmp_path / "released.toml").write_text(
        '[[version]]\nfile = "0001_t.sql"\nchecksum = "ab"\nrelease = "c0ffee0"\n'
        'kind = "body"\nwhy = "changed"\n'
    )
    with pytest.raises(ConfigError, match="repaired_by"):
        load_released(tmp_path)
    (tmp_path / "released.toml").write_text(
        '[[version]]\nfile = "0001_t.sql"\nchecksum = "ab"\nrelease = "c0ffee0"\n'
        'kind = "comments"\nwhy = "a path in a comment"\n'
    )
    assert accepted_by_file(load_released(tmp_path)) == {"0001_t.sql": frozenset({"ab"})}


def test_the_refusal_tells_an_operator_what_to_do() -> None:
    message = unreleased_message(["0007_x.sql"], {"0007_x.sql": Recorded("59c6f3fe45462f39", None)})
    assert "0007_x.sql (recorded 59c6f3fe4546)" in message
    assert "awooop doctor" in message and "Upgrading" in message
