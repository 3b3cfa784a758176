"""Each migration's phase, and what ``awooop migrate`` applies or holds back for a live fleet."""

from __future__ import annotations

import pytest

from awooop.core.errors import MigrationPhaseError
from awooop.core.migrate import discover
from awooop.core.migration_phases import (
    FIRST_DECLARED,
    LiveProcess,
    Phase,
    Step,
    plan,
    step_of,
)

RAISE = "UPDATE awooop_schema_floor SET oldest_release = '{}';"


def process(release: str, kind: str = "worker") -> LiveProcess:
    return LiveProcess(f"h:1:{kind}{release}", kind, "h", 1, release)


def test_every_file_of_the_release_has_a_valid_phase() -> None:
    steps = [step_of(m.name, m.sql) for m in discover()]
    assert steps and all(s.phase in (Phase.EXPAND, Phase.CONTRACT) for s in steps)
    declared = [m for m in discover() if m.name >= FIRST_DECLARED]
    assert declared, "the registry migration itself declares its phase"
    assert all("-- phase:" in m.sql for m in declared)


def test_files_released_before_phases_count_as_expand_unless_they_raise_the_floor() -> None:
    assert step_of("0050_a.sql", "CREATE TABLE t (a int);") == Step(
        "0050_a.sql", Phase.EXPAND, None
    )
    old_contract = step_of("0060_b.sql", RAISE.format("0060_b.sql"))
    assert old_contract == Step("0060_b.sql", Phase.CONTRACT, "0060_b.sql")


@pytest.mark.parametrize(
    ("sql", "says"),
    [
        ("CREATE TABLE t (a int);", "must declare its phase"),
        ("-- phase: shrink\nCREATE TABLE t (a int);", "must declare its phase"),
        ("-- phase: expand\n-- phase: expand\nSELECT 1;", "must declare its phase"),
        ("-- phase: expand\n" + RAISE.format("0200_c.sql"), "declare it '-- phase: contract'"),
        ("-- phase: contract\nALTER TABLE t DROP COLUMN a;", "must raise the schema floor once"),
        ("-- phase: contract\n" + RAISE.format("0300_later.sql"), "must raise the schema floor"),
    ],
)
def test_a_new_file_with_a_missing_or_contradicted_phase_is_refused(sql: str, says: str) -> None:
    with pytest.raises(MigrationPhaseError) as refused:
        step_of("0200_c.sql", sql)
    assert refused.value.code == "E-MIGRATE-004" and says in refused.value.message


def test_a_contract_file_names_the_floor_it_raises() -> None:
    sql = "-- phase: contract\nALTER TABLE t DROP COLUMN a;\n" + RAISE.format("0190_prev.sql")
    assert step_of("0200_c.sql", sql) == Step("0200_c.sql", Phase.CONTRACT, "0190_prev.sql")


EXPAND_1 = Step("0201_a.sql", Phase.EXPAND, None)
CONTRACT = Step("0202_b.sql", Phase.CONTRACT, "0201_a.sql")
EXPAND_2 = Step("0203_c.sql", Phase.EXPAND, None)
STEPS = [EXPAND_1, CONTRACT, EXPAND_2]


def test_with_no_older_process_live_every_step_is_applied() -> None:
    chosen = plan(STEPS, [process("0201_a.sql"), process("0203_c.sql")], expand_only=False)
    assert (chosen.apply, chosen.held, chosen.breaks_fleet) == (STEPS, [], False)


def test_a_contract_step_that_would_stop_a_live_process_is_held_back_with_what_follows() -> None:
    old = process("0120_x.sql", "serve")
    chosen = plan(STEPS, [old, process("0203_c.sql")], expand_only=False)
    assert chosen.apply == [EXPAND_1]
    assert chosen.held == [CONTRACT, EXPAND_2]
    assert chosen.stopped_by_held == [old] and chosen.breaks_fleet


def test_the_expand_phase_stops_before_the_first_contract_step_without_blaming_anyone() -> None:
    chosen = plan(STEPS, [], expand_only=True)
    assert (chosen.apply, chosen.held, chosen.breaks_fleet) == (
        [EXPAND_1],
        [CONTRACT, EXPAND_2],
        False,
    )
    only_expand = plan([EXPAND_1, EXPAND_2], [process("0001_a.sql")], expand_only=True)
    assert only_expand.apply == [EXPAND_1, EXPAND_2] and not only_expand.held
