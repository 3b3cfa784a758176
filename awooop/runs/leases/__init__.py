"""Run leases (R-11, R-12, R-13, R-16): claim, heartbeat, fenced writes, release, reap.

Three modules, one job each, named here as one API (``from awooop.runs import leases``):
:mod:`~awooop.runs.leases.rules` (pure decisions: availability, the claim and reap events, the
fence), :mod:`~awooop.runs.leases.single` (one run at a time) and
:mod:`~awooop.runs.leases.batch` (many runs at once, the worker's hot path). Every write goes
through the log room (:mod:`awooop.eventlog`).

Postgres is the truth: a worker runs a run only while ``awooop_run_state`` says that its
attempt holds the lease. The rules, in one place:

- **claim**: one conditional statement locks the row only when the run is PENDING or RESUMED
  and its lease is empty or expired (``FOR UPDATE SKIP LOCKED``); ``RunClaimed`` is applied in
  the same transaction (RUNNING, ``attempt_count + 1``, ``worker_id``, ``lease_until`` = the
  database clock + the lease TTL). The polling path does the same over many rows at once.
  Claims of announced runs (:func:`claim_many`) are that whole transaction in ONE statement
  (``awooop/eventlog/sql/claim_many.sql``: lock, stream head, row, event), so that a claim costs
  one round trip; its row update is ``apply(state, RunClaimed)`` written in SQL, and tests
  hold the two equal (``awooop/eventlog/WRITERS.md``).
  The commonest fenced write, ``RunCompleted``, is one statement too (:func:`complete_many`,
  ``complete_many.sql``): the fence is its WHERE clause. So is a sleep's ``WaitStarted``
  (:func:`sleep_many`, ``sleep_many.sql``: the run WAITING_EVENT, the wait's row), and so are
  an attempt's journal events, a model call and a step's result (:class:`Journal`,
  :func:`journal_many`, ``journal_many.sql``), while the run is RUNNING.
- **fence**: every write on behalf of an attempt (step results, tool waits, approval requests,
  completion, failure, release) locks the row and is refused with E-RUN-002 unless the row
  still names this worker and attempt, is RUNNING or WAITING_TOOL, and its lease has not
  expired by the database clock. An expired lease is lost even before the reaper has seen it:
  a heartbeat does not revive it and a fenced write refuses it, so "who may write" never
  depends on how quickly the reaper runs.
- **heartbeat**: one statement renews the live leases of a worker it is given (the worker
  sends them in chunks: awooop.worker.heartbeat) and returns the runs it renewed; a run
  missing from the answer was lost. Heartbeats write no events: ``lease_until`` and
  ``heartbeat_at`` of a leased run are the lease clock, the only columns of the row that
  are not ``apply()`` folded over the events (the replay tool compares them only for runs that
  are not leased).
- **reap**: a RUNNING or WAITING_TOOL run whose lease expired goes back to PENDING
  (``RunRequeued``) while ``attempt_count < max_attempts``, else it FAILS with
  ``Max retry attempts exceeded`` (E-RUN-004). Both events name the expired attempt, its
  worker and the lease's last renewal (:func:`lease_expiry` says it in words, in the event's
  reason and in ``failure_reason``); the failure is marked ``dead_letter``, so its dead letter
  is recorded in the same transaction (R-19). When the expired lease's worker held other runs
  too, the run is requeued as a suspect instead, uncharged, and runs alone from then on
  (:mod:`~awooop.runs.leases.suspects`). WAITING_APPROVAL holds
  no lease and is never reaped. The same decision serves the reaper loop and a worker that
  takes an expired run directly (reclaim, polling), which requeues and claims in one
  transaction.
"""

from __future__ import annotations

from awooop.runs.leases.batch import (
    HEAD_CONFLICT_RETRIES,
    claim_many,
    complete_many,
    fenced_record_many,
    journal_many,
    prepare_run_statements,
    sleep_many,
)
from awooop.runs.leases.rules import (
    JOURNAL_CLOCK,
    Availability,
    ClaimBatch,
    Completion,
    Fence,
    FencedWrite,
    Journal,
    Sleep,
    Taken,
    Verdict,
    availability,
    claim_event,
    completion_problem,
    fence_problem,
    lease_expiry,
    notice_verdict,
    reap_event,
    sleep_problem,
)
from awooop.runs.leases.single import (
    FAIR_WINDOW,
    Undelivered,
    claim,
    fail_undeliverable,
    fenced_record,
    fences,
    heartbeat,
    peek,
    poll,
    reap,
    release,
    take_expired,
    take_expired_batch,
)
from awooop.runs.leases.statements import RunStatements

__all__ = (
    "FAIR_WINDOW",
    "HEAD_CONFLICT_RETRIES",
    "JOURNAL_CLOCK",
    "Availability",
    "ClaimBatch",
    "Completion",
    "Fence",
    "FencedWrite",
    "Journal",
    "RunStatements",
    "Sleep",
    "Taken",
    "Undelivered",
    "Verdict",
    "availability",
    "claim",
    "claim_event",
    "claim_many",
    "complete_many",
    "completion_problem",
    "fail_undeliverable",
    "fence_problem",
    "fenced_record",
    "fenced_record_many",
    "fences",
    "heartbeat",
    "journal_many",
    "lease_expiry",
    "notice_verdict",
    "peek",
    "poll",
    "prepare_run_statements",
    "reap",
    "reap_event",
    "release",
    "sleep_many",
    "sleep_problem",
    "take_expired",
    "take_expired_batch",
)
