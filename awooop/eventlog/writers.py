"""Every statement that writes ``awooop_events``, ``awooop_event_streams`` or
``awooop_run_state``: where it is, what it writes, which case of ``apply()``
(:mod:`awooop.eventlog.state`) it writes in SQL, and the tests that hold it equal to the fold.

``WRITERS.md`` shows the same table for reading. ``tests/integration/test_log_writers.py`` runs
a case for every entry (it fails when an entry has no case, when a ``sql/*.sql`` file writes a
log table without an entry, or when a module outside ``awooop/eventlog/`` writes one), and checks
after each that every run row equals ``apply`` folded over the run's events and every stream
head equals its last event.

Two writers are not SQL files of this room, on purpose:

- ``update_run`` runs once per change (``apply_and_store``) and, pipelined by ``executemany``,
  for many changes (``apply_and_store_many``): one statement, two calls.
- ``replay_repair`` (``awooop replay run_state --project P --swap``) copies the rows the replay
  folded from the log with the same ``apply`` into the live table. Its statements are the
  projection tool's generic repair (:func:`awooop.projections.diff.repair_sql`), written once for
  every projection's tables (identifiers from each ``TableSpec``); they write no event. The
  whole-table swap (``replay run_state --swap``) renames a table and writes no row.
"""

from __future__ import annotations

from typing import NamedTuple

EVENTS = "awooop_events"
STREAMS = "awooop_event_streams"
RUNS = "awooop_run_state"
DEDUPE = "awooop_channel_event_dedupe"


class Writer(NamedTuple):
    name: str  # the statement: sql/<name>.sql unless ``source`` says otherwise
    function: str  # the Python function that runs it
    tables: tuple[str, ...]  # the tables it writes
    mirrors: str  # the apply() case(s) it writes in SQL, or what it writes instead
    tests: tuple[str, ...]  # the tests that hold it equal to the fold (besides the contract)
    source: str = ""  # where the statement is when it is not awooop/eventlog/sql/<name>.sql


WRITERS: tuple[Writer, ...] = (
    Writer(
        "append",
        "awooop.eventlog.eventlog.append",
        (STREAMS, EVENTS),
        "the event half of every apply(): appended at the row's version, in the same "
        "transaction as the row (create_run, apply_and_store)",
        (
            "tests/integration/test_eventlog.py",
            "tests/integration/test_run_write_path.py::"
            "test_the_row_equals_apply_folded_over_the_events",
        ),
    ),
    Writer(
        "append_many",
        "awooop.eventlog.eventlog.append_many",
        (STREAMS, EVENTS),
        "the event half of apply_and_store_many (one event per run)",
        ("tests/integration/test_worker_batches.py",),
    ),
    Writer(
        "append_runs",
        "awooop.eventlog.eventlog.append_many",
        (STREAMS, EVENTS),
        "the event half of apply_and_store_many when a run takes several events (a model "
        "call and its step: run.llm_step), at consecutive versions",
        (
            "tests/integration/test_log_writers.py::"
            "test_the_writer_leaves_every_row_equal_to_the_fold_of_its_events",
            "tests/integration/test_worker_llm_step.py",
        ),
    ),
    Writer(
        "append_at_head",
        "awooop.eventlog.eventlog.append_at_head",
        (STREAMS, EVENTS),
        "none: a producer's own domain events (no run row); the head moves by their count",
        ("tests/integration/test_producer_domain_events.py",),
    ),
    Writer(
        "insert_run",
        "awooop.eventlog.runs.create_run",
        (RUNS,),
        "apply(None, RunCreated): the row built in Python",
        (
            "tests/integration/test_run_write_path.py::"
            "test_the_row_equals_apply_folded_over_the_events",
        ),
    ),
    Writer(
        "update_run",
        "awooop.eventlog.runs.apply_and_store, awooop.eventlog.runs.apply_and_store_many",
        (RUNS,),
        "apply(state, event) for every event after RunCreated: the row built in Python",
        (
            "tests/integration/test_run_write_path.py::"
            "test_the_row_equals_apply_folded_over_the_events",
            "tests/integration/test_worker_batches.py",
        ),
    ),
    Writer(
        "renew_leases",
        "awooop.eventlog.runs.renew_leases",
        (RUNS,),
        "none: the lease clock (lease_until, heartbeat_at of a leased run, R-12) moves forward "
        "without an event, with the step the attempt is in (current_step*, outside the fold); "
        "the rest of the row stays the fold",
        (
            "tests/integration/test_replay_run_state.py::test_a_lease_clock_behind_the_log_is_a_difference",
        ),
    ),
    Writer(
        "claim_many",
        "awooop.eventlog.batches.claim_many",
        (RUNS, STREAMS, EVENTS),
        "apply(state, RunClaimed) written in SQL",
        ("tests/integration/test_worker_batches.py::test_claim_statement_matches_apply",),
    ),
    Writer(
        "complete_many",
        "awooop.eventlog.batches.complete_many",
        (RUNS, STREAMS, EVENTS),
        "apply(state, RunCompleted) written in SQL",
        ("tests/integration/test_worker_batches.py::test_complete_statement_matches_apply",),
    ),
    Writer(
        "sleep_many",
        "awooop.eventlog.batches.sleep_many",
        (RUNS, STREAMS, EVENTS),
        "apply(state, WaitStarted) of a sleep written in SQL, with the wait's row (waits.follow)",
        (
            "tests/integration/test_sleep_statement.py::test_sleep_statement_matches_apply",
            "tests/integration/test_sleep_statement.py::"
            "test_sleep_statement_refuses_what_the_fence_refuses",
        ),
    ),
    Writer(
        "journal_many",
        "awooop.eventlog.batches.journal_many",
        (RUNS, STREAMS, EVENTS),
        "apply(state, e) of journal events (ModelCalled, StepCompleted) written in SQL",
        (
            "tests/integration/test_journal_statement.py::test_journal_statement_matches_apply",
            "tests/integration/test_journal_statement.py::"
            "test_journal_statement_refuses_what_the_fence_refuses",
        ),
    ),
    Writer(
        "fire_many",
        "awooop.eventlog.batches.fire_many",
        (RUNS, STREAMS, EVENTS),
        "apply(state, TimerFired) written in SQL, the waits' rows removed (waits.follow)",
        ("tests/integration/test_sleep_statement.py::test_fire_statement_matches_apply",),
    ),
    Writer(
        "fire_claim",
        "awooop.eventlog.batches.fire_claim",
        (RUNS, STREAMS, EVENTS),
        "apply(state, TimerFired) written in SQL on the runs a worker left sleeping at the "
        "versions it names, the waits' rows removed (waits.follow), then apply(state, "
        "RunClaimed) by that worker on those a claim may take now",
        (
            "tests/integration/test_sleep_statement.py::test_fire_claim_statement_matches_apply",
            "tests/integration/test_sleep_statement.py::"
            "test_fire_claim_leaves_a_run_a_claim_may_not_take_fired",
        ),
    ),
    Writer(
        "ingest_new",
        "awooop.eventlog.ingest.insert_new",
        (DEDUPE, RUNS, STREAMS, EVENTS),
        "apply(None, RunCreated): the row built in Python, the clock stamped by now()",
        (
            "tests/integration/test_ingest_store.py::"
            "test_each_run_row_equals_the_replay_of_its_event_on_one_clock",
        ),
    ),
    Writer(
        "replay_repair",
        "awooop.projections.diff.repair_project",
        (RUNS,),
        "every case: copies rows folded from the log with apply (live lease clock kept)",
        (
            "tests/integration/test_replay_run_state.py::"
            "test_a_corrupted_row_is_reported_and_repaired_by_swap",
        ),
        source="projections/diff.py (repair_sql)",
    ),
)

BY_NAME: dict[str, Writer] = {w.name: w for w in WRITERS}
