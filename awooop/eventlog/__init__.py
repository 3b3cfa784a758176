"""The only room that writes the event log and the run-state rows.

Every statement that writes ``awooop_events``, ``awooop_event_streams`` or ``awooop_run_state``
is a file in ``sql/`` (loaded by name, :mod:`awooop.eventlog.queries`) run by one function here:

- :mod:`awooop.eventlog.eventlog`: append to a stream (at a version, many streams, at the head) and
  follow the log;
- :mod:`awooop.eventlog.runs`: create a run, apply an event to one or many runs, renew leases;
- :mod:`awooop.eventlog.batches`: the worker's one-statement claim and completion of many runs;
- :mod:`awooop.eventlog.ingest`: dedupe rows, runs and their first events in one statement;
- :mod:`awooop.eventlog.state`: the run model and ``apply``, which every writer keeps the rows
  equal to;
- :mod:`awooop.eventlog.archive`: an old partition written to a file
  (:mod:`awooop.eventlog.archive_files`), its streams' snapshots kept, then dropped; the files read
  back for a replay from the beginning (:mod:`awooop.eventlog.archive_restore`).

``WRITERS.md`` (and :mod:`awooop.eventlog.writers`, the same table as data) says for each statement
what it writes, the ``apply()`` case it mirrors and the tests that hold it equal;
``tests/integration/test_log_writers.py`` runs them all.
"""
