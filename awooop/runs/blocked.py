"""What a run waits for, and the next safe action: ``blocked_on``, a pure decision.

:func:`decide` takes the facts about one run (:class:`RunFacts`, read in one query by
:mod:`awooop.runs.blocked_facts`) and about its shard's work stream (:class:`ShardFacts`, read
from Redis once per shard) and names a :class:`Reason`:

| status           | facts                                          | reason                 |
|------------------|------------------------------------------------|------------------------|
| PENDING, RESUMED | it has an open dead letter (Postgres)          | pending_dead_lettered  |
|                  | its project, channel or contract is paused     | paused                 |
|                  | its concurrency key has no free slot           | over_concurrency_limit |
|                  | no worker alive, none read its shard recently  | pending_no_worker      |
|                  | live workers, none serves its contract/project | no_worker_for_contract |
|                  | its serving workers run no version it accepts  | no_worker_for_version  |
|                  | a suspect: waits to run alone on a worker      | pending_isolation      |
|                  | an earlier attempt ended (attempt_count > 0)   | retry_pending          |
|                  | otherwise: readers are there, all busy         | pending_workers_busy   |
| RUNNING          | lease live, a model call waits for a token     | rate_limited           |
|                  | lease live, a model call waits for a budget    | over_budget            |
|                  | lease live                                     | running                |
| WAITING_TOOL     | lease live, its tools answered, its key full   | over_concurrency_limit |
|                  | lease live                                     | waiting_tool           |
| either           | lease expired (the reaper's turn)              | lease_expired          |
| WAITING_APPROVAL | approval open / past its expiry                | waiting_approval /     |
|                  |                                                | approval_expired       |
| WAITING_EVENT    | asleep / waits for a signal / for child runs   | sleeping /             |
|                  | (its open wait)                                | waiting_for_event /    |
|                  |                                                | waiting_for_children   |
| FAILED           | E-RUN-004 or E-RUN-005 (work dead-lettered)    | failed_dead_lettered   |
|                  | otherwise                                      | failed                 |
| COMPLETED, CANCELLED | -                                          | None (nothing blocks)  |

A running run's summary (and its ``step``, ``step_started_at``) names the step its attempt is
in and since when, as its worker reported it with its last lease renewal.

The rows are checked top down: a PENDING run retried after a crash whose shard nobody reads is
``pending_no_worker`` (that is what blocks it); its attempt is in the summary either way.

Derived at read time, not projected into run state: half of the answer is the clock (a lease
or an approval past its time changes the reason with no event), the rest lives outside the
run's stream (a Redis group's consumers, dead-letter, approval and wait rows); a projected
field would be stale, need a write per heartbeat and could not be rebuilt by replay. The CLI,
the console, ``awooop doctor`` and the ``awooop_runs_blocked`` gauge all call this one
function, so they cannot disagree.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import msgspec

from awooop.core.durations import elapsed
from awooop.core.errors import DeliveryLimitError
from awooop.eventlog.state import MAX_ATTEMPTS_CODE, RunStatus
from awooop.runs.blocked_reasons import REASON_STATUSES as REASON_STATUSES
from awooop.runs.blocked_reasons import Reason as Reason
from awooop.runs.blocked_reasons import ShardFacts as ShardFacts
from awooop.runs.blocked_waits import WaitFacts, describe_wait
from awooop.runs.pause_rules import Scope, describe_scope, resume_command
from awooop.runs.versions import VersionWait

DELIVERY_LIMIT_CODE = DeliveryLimitError.code  # the worker dead-lettered the message
DEAD_LETTER_CODES = frozenset({MAX_ATTEMPTS_CODE, DELIVERY_LIMIT_CODE})


class RunFacts(msgspec.Struct, frozen=True, kw_only=True):
    """One row of :data:`awooop.runs.blocked_facts.FACTS`."""

    run_id: uuid.UUID
    project_id: str
    status: RunStatus
    attempt_count: int
    max_attempts: int
    worker_id: str | None
    lease_until: datetime | None
    heartbeat_at: datetime | None
    waiting_for: str | None
    approval_expires_at: datetime | None
    failure_reason: str | None
    failure_code: str | None
    updated_at: datetime
    now: datetime
    approval_name: str | None = None
    approval_reason: str | None = None
    last_end_type: str | None = None  # the last RunRequeued/LeaseReleased/RunFailed/Approval*
    last_end_reason: str | None = None
    dead_lettered: bool = False  # the run has an open dead letter (awooop_dead_letters)
    suspect_worker_id: str | None = None  # a suspect: it runs alone (leases.suspects)
    # The widest active pause that holds it (awooop.runs.pauses): scope, key, who, why
    paused_scope: Scope | None = None
    paused_key: str = ""
    paused_by: str | None = None
    paused_reason: str = ""
    # Its concurrency key (migration 0132), the key's maximum and the runs holding its slots
    concurrency_key: str | None = None
    concurrency_max: int | None = None
    concurrency_executing: int | None = None
    # Its limit's global maximum over every key of the scope, and the scope's runs holding slots
    concurrency_global_max: int | None = None
    concurrency_scope_executing: int | None = None
    # The step an attempt reported with its last renewal (migration 0127), and which attempt.
    current_step: str | None = None
    current_step_started_at: datetime | None = None
    current_step_attempt: int | None = None
    # A flow-control wait of the attempt: why, on which key, what, until when: a model call's
    # (awooop.llm.admission), or a re-admission's after its tools (awooop.worker.tool_waits).
    flow_reason: str | None = None
    flow_key: str = ""
    flow_detail: str = ""
    flow_until: datetime | None = None
    # Its contract, and whether a live worker serves it (awooop.runs.routing; migration 0137):
    # None when unknown (no live worker process, or not a PENDING/RESUMED run).
    contract_id: str | None = None
    served: bool | None = None
    # Its contract's required handler versions, and those the live workers run (migration 0140)
    versions: VersionWait | None = None
    wait: WaitFacts | None = None  # WAITING_EVENT: its open wait (awooop.runs.blocked_waits)


class BlockedOn(msgspec.Struct, frozen=True, kw_only=True):
    reason: Reason
    since: datetime
    summary: str
    next_action: str
    attempt: int
    max_attempts: int
    worker_id: str | None = None
    retry_allowed: bool | None = None  # FAILED only: may `awooop runs retry` send it back
    # RUNNING, WAITING_TOOL: the step the attempt is in and when it started (None: in none, or
    # its worker has not renewed since it entered it).
    step: str | None = None
    step_started_at: datetime | None = None
    until: datetime | None = None  # WAITING_EVENT: the sleep's due time, the wait's timeout


def current_step(f: RunFacts) -> tuple[str, datetime] | None:
    """Pure: the step the run's attempt is in and since when, as its worker last reported it;
    None when it is in none, or when what the row holds is another attempt's (a report is
    only the current attempt's while it holds the run)."""
    step, started_at = f.current_step, f.current_step_started_at
    if step is None or started_at is None or f.current_step_attempt != f.attempt_count:
        return None
    return (step, started_at) if f.status in (RunStatus.RUNNING, RunStatus.WAITING_TOOL) else None


def limit_text(f: RunFacts) -> str | None:
    """Pure: which limit holds a keyed run back, with its count, or None: every slot of its key
    held (RUNNING runs with a live lease), or every slot of its scope under the limit's global
    maximum."""
    if f.concurrency_key is None:
        return None
    if f.concurrency_max is not None and (f.concurrency_executing or 0) >= f.concurrency_max:
        return (
            f"concurrency key {f.concurrency_key} is at its limit: "
            f"{f.concurrency_executing} of {f.concurrency_max} executing"
        )
    top = f.concurrency_global_max
    if top is not None and (f.concurrency_scope_executing or 0) >= top:
        scope = f.concurrency_key.split("/", 1)[0]
        return (
            f"the global maximum of {scope} is reached: {f.concurrency_scope_executing} of "
            f"{top} executing over all its keys"
        )
    return None


def step_text(f: RunFacts) -> str:
    """Pure: ``in step `name` since <time> (31 min)``, or empty when no step is known."""
    found = current_step(f)
    if found is None:
        return ""
    name, started_at = found
    return f"in step `{name}` since {_at(started_at)} ({elapsed(f.now, started_at)})"


def failed_reason(failure_code: str | None) -> Reason:
    """Pure: the reason of a FAILED run (also used to count FAILED runs in SQL per code)."""
    return Reason.FAILED_DEAD_LETTERED if failure_code in DEAD_LETTER_CODES else Reason.FAILED


def _ago(now: datetime, then: datetime | None) -> str:
    if then is None:
        return "never"
    seconds = (now - then).total_seconds()
    return f"{seconds:.0f}s ago" if seconds >= 0 else f"in {-seconds:.0f}s"


def _at(moment: datetime | None) -> str:
    return "-" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%SZ")


def _blocked(f: RunFacts, **fields: Any) -> BlockedOn:
    return BlockedOn(
        since=f.updated_at, attempt=f.attempt_count, max_attempts=f.max_attempts, **fields
    )


def decide(facts: RunFacts, shard: ShardFacts) -> BlockedOn | None:
    """Pure: the table in the module docstring. None for a finished run."""
    f = facts
    ref = f"{f.project_id} {f.run_id}"
    match f.status:
        case RunStatus.PENDING | RunStatus.RESUMED:
            next_attempt = f"attempt {f.attempt_count + 1} of {f.max_attempts}"
            waiting = f"{f.status.value.lower()} since {_at(f.updated_at)}, {next_attempt}"
            if f.dead_lettered:
                return _blocked(
                    f,
                    reason=Reason.PENDING_DEAD_LETTERED,
                    summary=f"{waiting}; it has an open dead letter",
                    next_action="awooop deadletters list, then awooop deadletters redrive ID",
                )
            if f.paused_scope is not None:
                scope = describe_scope(f.paused_scope, f.paused_key)
                why = f": {f.paused_reason}" if f.paused_reason else ""
                return _blocked(
                    f,
                    reason=Reason.PAUSED,
                    summary=f"{waiting}; {scope} of {f.project_id} paused by {f.paused_by}{why}",
                    next_action=resume_command(f.project_id, f.paused_scope, f.paused_key),
                )
            held = limit_text(f)
            if held is not None:
                return _blocked(
                    f,
                    reason=Reason.OVER_CONCURRENCY_LIMIT,
                    summary=f"{waiting}; {held}",
                    next_action="none: it starts when a run of its key ends; awooop projects "
                    f"limits --project {f.project_id}",
                )
            if shard.unread:
                return _blocked(
                    f,
                    reason=Reason.PENDING_NO_WORKER,
                    summary=f"{waiting}; no worker has read shard {shard.shard} recently",
                    next_action="start an awooop worker (awooop doctor: consumer groups)",
                )
            if f.served is False:
                contract = f.contract_id or "(none)"
                return _blocked(
                    f,
                    reason=Reason.NO_WORKER_FOR_CONTRACT,
                    summary=f"{waiting}; no live worker serves contract {contract} of "
                    f"{f.project_id}",
                    next_action="start a worker that serves it: awooop worker --handler H "
                    + (f"--contract {f.contract_id}" if f.contract_id else "(no --contract)"),
                )
            if f.versions is not None and f.versions.blocks:
                return _blocked(
                    f,
                    reason=Reason.NO_WORKER_FOR_VERSION,
                    summary=f"{waiting}; {f.versions.summary}",
                    next_action=f.versions.next_action,
                )
            if f.suspect_worker_id is not None:
                return _blocked(
                    f,
                    reason=Reason.PENDING_ISOLATION,
                    summary=f"{waiting}; a suspect since worker {f.suspect_worker_id} died "
                    "holding it and other runs: it waits for a worker with nothing else in "
                    "flight to run it alone",
                    next_action="none: a worker finishes its runs and takes it; suspects run "
                    "one at a time per worker",
                    worker_id=f.suspect_worker_id,
                )
            if f.attempt_count > 0:
                why = f.last_end_reason or f.last_end_type or "unknown"
                return _blocked(
                    f,
                    reason=Reason.RETRY_PENDING,
                    summary=f"{waiting}; the last attempt ended: {why}",
                    next_action=f"none: a worker takes it; awooop runs cancel {ref} to stop it",
                )
            readers = f"{shard.reading} worker(s) read shard {shard.shard}" if shard.known else ""
            return _blocked(
                f,
                reason=Reason.PENDING_WORKERS_BUSY,
                summary=f"{waiting}; waits for a free worker {readers}".rstrip(),
                next_action="none: a worker takes it; add workers if it waits long",
            )
        case RunStatus.RUNNING | RunStatus.WAITING_TOOL:
            lease = (
                f"worker {f.worker_id}, last heartbeat {_ago(f.now, f.heartbeat_at)}, "
                f"lease until {_at(f.lease_until)}"
            )
            found = current_step(f)
            step = {"step": found[0], "step_started_at": found[1]} if found else {}
            in_step = step_text(f)
            if f.lease_until is not None and f.lease_until < f.now:
                return _blocked(
                    f,
                    reason=Reason.LEASE_EXPIRED,
                    summary=f"the lease of attempt {f.attempt_count} expired"
                    f"{' ' + in_step if in_step else ''}: {lease}",
                    next_action="none: the reaper requeues it (check awooop loops list: reaper)",
                    worker_id=f.worker_id,
                    **step,
                )
            slot_wait = f.flow_reason == Reason.OVER_CONCURRENCY_LIMIT  # tool_waits.py
            if f.status is RunStatus.WAITING_TOOL and slot_wait:
                return _blocked(
                    f,
                    reason=Reason.OVER_CONCURRENCY_LIMIT,
                    summary=f"{f.flow_detail}: waits for a slot of concurrency key "
                    f"{f.concurrency_key} to continue ({f.concurrency_executing} of "
                    f"{f.concurrency_max} executing); {lease}",
                    next_action="none: it continues when a run of its key ends; awooop "
                    f"projects limits --project {f.project_id}",
                    worker_id=f.worker_id,
                )
            if f.status is RunStatus.WAITING_TOOL:
                return _blocked(
                    f,
                    reason=Reason.WAITING_TOOL,
                    summary=f"waits for tool {f.waiting_for} since {_at(f.updated_at)}; {lease}",
                    next_action=f"none: the tool answers; awooop runs cancel {ref} to stop it",
                    worker_id=f.worker_id,
                    **step,
                )
            running = f"running attempt {f.attempt_count} of {f.max_attempts}"
            if f.status is RunStatus.RUNNING and f.flow_reason is not None and not slot_wait:
                detail = f" ({f.flow_detail})" if f.flow_detail else ""
                return _blocked(
                    f,
                    reason=Reason(f.flow_reason),
                    summary=f"{running}: a model call waits, {f.flow_reason} on {f.flow_key}"
                    f"{detail}, until {_at(f.flow_until)}; {lease}",
                    next_action="none: the call goes when its token is due or the budget's "
                    "next period starts; awooop projects budget|rate-limit to change the limit",
                    worker_id=f.worker_id,
                    **step,
                )
            return _blocked(
                f,
                reason=Reason.RUNNING,
                summary=f"{running}{', ' + in_step if in_step else ''}: {lease}",
                next_action=f"none: it runs; awooop runs cancel {ref} to stop it",
                worker_id=f.worker_id,
                **step,
            )
        case RunStatus.WAITING_APPROVAL:
            asked = f.approval_name or "approval"
            if f.approval_reason:
                asked += f" ({f.approval_reason})"
            expires = _at(f.approval_expires_at)
            if f.approval_expires_at is not None and f.approval_expires_at < f.now:
                return _blocked(
                    f,
                    reason=Reason.APPROVAL_EXPIRED,
                    summary=f"approval {asked} expired at {expires}",
                    next_action="none: the approval resolver fails it with E-APPROVAL-002 "
                    "(check awooop loops list)",
                )
            return _blocked(
                f,
                reason=Reason.WAITING_APPROVAL,
                summary=f"waits for approval {asked}, expires at {expires}",
                next_action=f"awooop runs approve|reject {ref} --by NAME (or --token TOKEN), "
                "or approve it in the console",
            )
        case RunStatus.WAITING_EVENT:
            reason, summary, action, until = describe_wait(f.wait, f.now, ref)
            return _blocked(f, reason=reason, summary=summary, next_action=action, until=until)
        case RunStatus.FAILED:
            reason = failed_reason(f.failure_code)
            why = f"{f.failure_code or '-'}: {f.failure_reason or 'no reason recorded'}"
            if reason is Reason.FAILED_DEAD_LETTERED:
                action = (
                    "fix the cause, then awooop deadletters redrive ID "
                    f"(awooop deadletters list) or awooop runs retry {ref}"
                )
            else:
                action = f"awooop runs retry {ref} (after fixing the cause)"
            return _blocked(
                f,
                reason=reason,
                # FAILED is final: no attempt of the run follows on its own (a handler's
                # exception fails the run; its max_attempts are for crashes and lost leases).
                summary=f"failed in attempt {f.attempt_count} of {f.max_attempts}, no attempt "
                f"follows: {why}",
                next_action=action,
                retry_allowed=True,  # RunRetried is legal from every FAILED run (log.state)
            )
    return None


def describe(blocked: BlockedOn | None) -> str:
    """Pure: the one line the CLI and the console print."""
    if blocked is None:
        return "-"
    return f"{blocked.reason.value}: {blocked.summary}; next: {blocked.next_action}"
