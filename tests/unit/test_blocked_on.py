"""blocked_on (awooop.runs.blocked.decide): one case per row of its table."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from awooop.eventlog.state import RunStatus
from awooop.runs.blocked import (
    REASON_STATUSES,
    Reason,
    RunFacts,
    ShardFacts,
    current_step,
    decide,
    describe,
    elapsed,
    failed_reason,
)
from awooop.runs.blocked_waits import WaitFacts
from awooop.runs.pause_rules import Scope
from awooop.runs.versions import VersionWait

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
RUN = uuid.UUID("00000000-0000-4000-8000-000000000001")
READ = ShardFacts(shard=2, known=True, readers=1)
UNREAD = ShardFacts(shard=2, known=True, readers=0)
UNKNOWN = ShardFacts(shard=2, known=False)


def facts(status: RunStatus, **changes: Any) -> RunFacts:
    base = RunFacts(
        run_id=RUN,
        project_id="p",
        status=status,
        attempt_count=0,
        max_attempts=3,
        worker_id=None,
        lease_until=None,
        heartbeat_at=None,
        waiting_for=None,
        approval_expires_at=None,
        failure_reason=None,
        failure_code=None,
        updated_at=NOW - timedelta(minutes=5),
        now=NOW,
    )
    return msgspec.structs.replace(base, **changes)


@pytest.mark.parametrize("status", [RunStatus.PENDING, RunStatus.RESUMED])
def test_pending_names_what_it_waits_for(status: RunStatus) -> None:
    fresh = facts(status)
    busy = decide(fresh, READ)
    assert busy is not None and busy.reason is Reason.PENDING_WORKERS_BUSY
    assert busy.since == fresh.updated_at and "attempt 1 of 3" in busy.summary
    unread = decide(fresh, UNREAD)
    assert unread is not None and unread.reason is Reason.PENDING_NO_WORKER
    assert "shard 2" in unread.summary and "start an awooop worker" in unread.next_action
    dead = decide(msgspec.structs.replace(fresh, dead_lettered=True), UNKNOWN)
    assert dead is not None and dead.reason is Reason.PENDING_DEAD_LETTERED
    assert "deadletters redrive" in dead.next_action
    # Redis did not answer: no guess about readers (dead letters are Postgres facts).
    blind = decide(fresh, UNKNOWN)
    assert blind is not None and blind.reason is Reason.PENDING_WORKERS_BUSY


def test_a_live_worker_by_its_heartbeat_reads_the_shard_whatever_xinfo_says() -> None:
    """Redis 7.0: idle workers on a quiet stream look gone to XINFO CONSUMERS (their empty
    reads do not reset idle); their heartbeats in Postgres say they are there."""
    quiet = ShardFacts(shard=2, known=True, readers=0, workers=2)
    got = decide(facts(RunStatus.PENDING), quiet)
    assert got is not None and got.reason is Reason.PENDING_WORKERS_BUSY
    assert "2 worker(s) read shard 2" in got.summary
    gone = ShardFacts(shard=2, known=True, readers=0, workers=0)
    unread = decide(facts(RunStatus.PENDING), gone)
    assert unread is not None and unread.reason is Reason.PENDING_NO_WORKER


def test_retry_pending_says_which_attempt_and_why_the_last_ended() -> None:
    requeued = facts(
        RunStatus.PENDING,
        attempt_count=1,
        last_end_type="RunRequeued",
        last_end_reason="lease of attempt 1 expired: worker w1 neither renewed it",
    )
    got = decide(requeued, READ)
    assert got is not None and got.reason is Reason.RETRY_PENDING
    assert "attempt 2 of 3" in got.summary and "worker w1 neither renewed" in got.summary
    assert got.attempt == 1 and got.max_attempts == 3
    # No reader beats the retry: it is what blocks the run (the attempt is still said).
    unread = decide(requeued, UNREAD)
    assert unread is not None and unread.reason is Reason.PENDING_NO_WORKER
    assert "attempt 2 of 3" in unread.summary
    released = decide(
        facts(RunStatus.PENDING, attempt_count=2, last_end_type="LeaseReleased"), READ
    )
    assert released is not None and "LeaseReleased" in released.summary


def test_running_and_waiting_tool_name_the_worker_and_the_lease() -> None:
    leased: dict[str, Any] = {
        "attempt_count": 1,
        "worker_id": "host:1:abc",
        "heartbeat_at": NOW - timedelta(seconds=4),
        "lease_until": NOW + timedelta(seconds=26),
    }
    running = decide(facts(RunStatus.RUNNING, **leased), READ)
    assert running is not None and running.reason is Reason.RUNNING
    assert running.worker_id == "host:1:abc"
    assert "last heartbeat 4s ago" in running.summary and "12:00:26Z" in running.summary
    tool = decide(facts(RunStatus.WAITING_TOOL, waiting_for="search", **leased), READ)
    assert tool is not None and tool.reason is Reason.WAITING_TOOL and "tool search" in tool.summary
    for status in (RunStatus.RUNNING, RunStatus.WAITING_TOOL):
        expired = dict(leased, lease_until=NOW - timedelta(seconds=1))
        got = decide(facts(status, **expired), READ)
        assert (
            got is not None and got.reason is Reason.LEASE_EXPIRED and "reaper" in got.next_action
        )


def test_a_running_run_names_the_step_its_attempt_reported() -> None:
    leased: dict[str, Any] = {
        "attempt_count": 2,
        "worker_id": "host:1:abc",
        "heartbeat_at": NOW - timedelta(seconds=4),
        "lease_until": NOW + timedelta(seconds=26),
        "current_step": "reserve_stock",
        "current_step_started_at": NOW - timedelta(minutes=31, seconds=5),
        "current_step_attempt": 2,
    }
    running = decide(facts(RunStatus.RUNNING, **leased), READ)
    assert running is not None and running.reason is Reason.RUNNING
    assert "in step `reserve_stock` since 2026-12-01 11:28:55Z (31 min)" in running.summary
    assert (running.step, running.step_started_at) == (
        "reserve_stock",
        NOW - timedelta(minutes=31, seconds=5),
    )
    expired = decide(
        facts(RunStatus.RUNNING, **dict(leased, lease_until=NOW - timedelta(seconds=1))), READ
    )
    assert expired is not None and expired.reason is Reason.LEASE_EXPIRED
    assert "expired in step `reserve_stock`" in expired.summary
    # What an earlier attempt reported is not this attempt's step; nor is a finished run's.
    stale = decide(facts(RunStatus.RUNNING, **dict(leased, current_step_attempt=1)), READ)
    assert stale is not None and stale.step is None and "in step" not in stale.summary
    done = facts(RunStatus.PENDING, **dict(leased, worker_id=None, lease_until=None))
    assert current_step(done) is None
    between = decide(facts(RunStatus.RUNNING, **dict(leased, current_step=None)), READ)
    assert between is not None and between.step is None


def test_elapsed_reads_as_people_say_it() -> None:
    assert elapsed(NOW, NOW - timedelta(seconds=45)) == "45 s"
    assert elapsed(NOW, NOW - timedelta(minutes=31, seconds=59)) == "31 min"
    assert elapsed(NOW, NOW - timedelta(hours=2, minutes=5)) == "2 h 5 min"
    assert elapsed(NOW, NOW + timedelta(seconds=3)) == "0 s"  # a worker's clock ahead


def test_waiting_approval_names_who_was_asked_and_when_it_expires() -> None:
    asked: dict[str, Any] = {
        "approval_name": "deploy",
        "approval_reason": "prod rollout",
        "approval_expires_at": NOW + timedelta(minutes=10),
    }
    got = decide(facts(RunStatus.WAITING_APPROVAL, **asked), UNREAD)  # readers do not matter
    assert got is not None and got.reason is Reason.WAITING_APPROVAL
    assert "deploy (prod rollout)" in got.summary and "12:10:00Z" in got.summary
    assert "awooop runs approve|reject p " in got.next_action
    late = dict(asked, approval_expires_at=NOW - timedelta(seconds=1))
    gone = decide(facts(RunStatus.WAITING_APPROVAL, **late), READ)
    assert gone is not None and gone.reason is Reason.APPROVAL_EXPIRED


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        ("E-RUN-004", Reason.FAILED_DEAD_LETTERED),
        ("E-RUN-005", Reason.FAILED_DEAD_LETTERED),
        ("E-HANDLER-001", Reason.FAILED),
        (None, Reason.FAILED),
    ],
)
def test_failed_says_why_and_that_retry_is_allowed(code: str | None, reason: Reason) -> None:
    got = decide(
        facts(RunStatus.FAILED, failure_code=code, failure_reason="boom", attempt_count=3), READ
    )
    assert got is not None and got.reason is reason and got.retry_allowed is True
    assert f"{code or '-'}: boom" in got.summary
    # A failed run is final: the summary does not suggest that another attempt comes.
    assert got.summary.startswith("failed in attempt 3 of ")
    assert "no attempt follows" in got.summary
    assert failed_reason(code) is reason
    assert ("deadletters redrive" in got.next_action) == (reason is Reason.FAILED_DEAD_LETTERED)


def test_a_suspect_waits_to_run_alone_and_says_whose_death_made_it_one() -> None:
    suspect = {"attempt_count": 1, "suspect_worker_id": "host-1-abc"}
    got = decide(facts(RunStatus.PENDING, **suspect), READ)
    assert got is not None and got.reason is Reason.PENDING_ISOLATION
    assert "worker host-1-abc died" in got.summary and got.worker_id == "host-1-abc"
    assert "alone" in got.summary
    # What blocks it more comes first: nobody reads its shard, or its message is dead.
    unread = decide(facts(RunStatus.PENDING, **suspect), UNREAD)
    assert unread is not None and unread.reason is Reason.PENDING_NO_WORKER
    # Once it runs, it is a running run like any other.
    running = decide(
        facts(RunStatus.RUNNING, lease_until=NOW + timedelta(seconds=5), **suspect), READ
    )
    assert running is not None and running.reason is Reason.RUNNING


@pytest.mark.parametrize("status", [RunStatus.COMPLETED, RunStatus.CANCELLED])
def test_finished_runs_wait_for_nothing(status: RunStatus) -> None:
    assert decide(facts(status), READ) is None
    assert describe(None) == "-"


def test_every_reason_comes_from_the_statuses_it_is_listed_under() -> None:
    assert set(REASON_STATUSES) == set(Reason)
    seen: dict[Reason, set[RunStatus]] = {}
    variants: list[dict[str, Any]] = [
        {},
        {"attempt_count": 1},
        {"lease_until": NOW - timedelta(seconds=1)},
        {"lease_until": NOW + timedelta(seconds=1)},
        {"approval_expires_at": NOW - timedelta(seconds=1)},
        {"approval_expires_at": NOW + timedelta(seconds=1)},
        {"failure_code": "E-RUN-005"},
        {"dead_lettered": True},
        {"served": False, "contract_id": "c2"},
        {
            "contract_id": "c2",
            "versions": VersionWait(
                project_id="p", contract_id="c2", accepted=("v2",), running=("v1",)
            ),
        },
        {"attempt_count": 1, "suspect_worker_id": "host-1-abc"},
        {"paused_scope": Scope.PROJECT},
        {"concurrency_key": "channel:api/k", "concurrency_max": 1, "concurrency_executing": 1},
        {"lease_until": NOW + timedelta(seconds=1), "flow_reason": "rate_limited"},
        {"lease_until": NOW + timedelta(seconds=1), "flow_reason": "over_budget"},
        {"wait": WaitFacts(kind="event", name="paid")},
        {"wait": WaitFacts(kind="children", needed=2, children=3, finished=1)},
        {"lease_until": NOW + timedelta(seconds=1), "flow_reason": "over_concurrency_limit"},
    ]
    shards = [READ, UNREAD]
    for status in RunStatus:
        for variant in variants:
            for shard in shards:
                got = decide(facts(status, **variant), shard)
                if got is not None:
                    seen.setdefault(got.reason, set()).add(status)
                    assert describe(got).startswith(got.reason.value + ": ")
    assert set(seen) == set(Reason)
    for reason, statuses in seen.items():
        assert statuses <= REASON_STATUSES[reason]


def test_a_run_whose_key_is_full_is_over_its_concurrency_limit() -> None:
    key = {"concurrency_key": "contract:orders/c-1", "concurrency_max": 2}
    full = decide(facts(RunStatus.PENDING, **key, concurrency_executing=2), READ)
    assert full is not None and full.reason is Reason.OVER_CONCURRENCY_LIMIT
    assert "contract:orders/c-1 is at its limit: 2 of 2 executing" in full.summary
    assert "awooop projects limits --project p" in full.next_action
    room = decide(facts(RunStatus.PENDING, **key, concurrency_executing=1), READ)
    assert room is not None and room.reason is Reason.PENDING_WORKERS_BUSY
    paused = facts(RunStatus.PENDING, **key, concurrency_executing=2, paused_scope=Scope.PROJECT)
    said = decide(paused, READ)
    assert said is not None and said.reason is Reason.PAUSED  # a pause is what holds it first


def test_a_run_held_by_its_scopes_global_maximum_is_over_its_concurrency_limit() -> None:
    key = {"concurrency_key": "contract:orders/c-1", "concurrency_max": 2}
    scope = {"concurrency_global_max": 5, "concurrency_executing": 1}
    full = decide(facts(RunStatus.PENDING, **key, **scope, concurrency_scope_executing=5), READ)
    assert full is not None and full.reason is Reason.OVER_CONCURRENCY_LIMIT
    assert "the global maximum of contract:orders is reached: 5 of 5 executing" in full.summary
    room = decide(facts(RunStatus.PENDING, **key, **scope, concurrency_scope_executing=4), READ)
    assert room is not None and room.reason is Reason.PENDING_WORKERS_BUSY


@pytest.mark.parametrize(
    ("reason", "key"),
    [(Reason.RATE_LIMITED, "awooop_llm:p:llama3.2"), (Reason.OVER_BUDGET, "awooop_llm:p")],
)
def test_a_model_call_waiting_for_flow_control_says_on_which_key_and_until_when(
    reason: Reason, key: str
) -> None:
    until = NOW + timedelta(minutes=3)
    waiting = facts(
        RunStatus.RUNNING,
        attempt_count=1,
        worker_id="w1",
        lease_until=NOW + timedelta(seconds=20),
        flow_reason=reason.value,
        flow_key=key,
        flow_detail="100 of 100 tokens used",
        flow_until=until,
    )
    got = decide(waiting, READ)
    assert got is not None and got.reason is reason
    assert f"{reason.value} on {key} (100 of 100 tokens used), until 2026-12-01 12:03:00Z" in (
        got.summary
    )
    assert "awooop projects budget|rate-limit" in got.next_action
    # Past its lease the wait says nothing more: the reaper's turn.
    expired = msgspec.structs.replace(waiting, lease_until=NOW - timedelta(seconds=1))
    lapsed = decide(expired, READ)
    assert lapsed is not None and lapsed.reason is Reason.LEASE_EXPIRED


def test_a_tool_wait_whose_tools_answered_waits_for_a_slot_of_its_key() -> None:
    waiting = facts(
        RunStatus.WAITING_TOOL,
        attempt_count=1,
        worker_id="w1",
        lease_until=NOW + timedelta(seconds=20),
        waiting_for="search",
        concurrency_key="channel:api/c-1",
        concurrency_max=1,
        concurrency_executing=1,
        flow_reason="over_concurrency_limit",
        flow_key="channel:api/c-1",
        flow_detail="tool search answered",
    )
    got = decide(waiting, READ)
    assert got is not None and got.reason is Reason.OVER_CONCURRENCY_LIMIT
    assert got.summary.startswith(
        "tool search answered: waits for a slot of concurrency key channel:api/c-1 to "
        "continue (1 of 1 executing); worker w1"
    )
    assert "awooop projects limits --project p" in got.next_action
    # while its tool runs, it waits for the tool (and holds no slot)
    calling = msgspec.structs.replace(waiting, flow_reason=None)
    said = decide(calling, READ)
    assert said is not None and said.reason is Reason.WAITING_TOOL
    expired = msgspec.structs.replace(waiting, lease_until=NOW - timedelta(seconds=1))
    lapsed = decide(expired, READ)
    assert lapsed is not None and lapsed.reason is Reason.LEASE_EXPIRED


def test_a_sleeping_run_says_until_when_and_an_event_wait_its_name_and_timeout() -> None:
    due = NOW + timedelta(seconds=30)
    asleep = decide(facts(RunStatus.WAITING_EVENT, wait=WaitFacts(kind="sleep", due_at=due)), READ)
    assert asleep is not None and asleep.reason is Reason.SLEEPING and asleep.until == due
    assert "sleeps until 2026-12-01 12:00:30Z" in asleep.summary
    late = decide(facts(RunStatus.WAITING_EVENT, wait=WaitFacts(kind="sleep", due_at=NOW)), READ)
    assert late is not None and "due: the timers loop resumes it" not in late.summary
    overdue = WaitFacts(kind="sleep", due_at=NOW - timedelta(seconds=1))
    late = decide(facts(RunStatus.WAITING_EVENT, wait=overdue), READ)
    assert late is not None and "due: the timers loop resumes it" in late.summary
    waits = WaitFacts(kind="event", name="paid", due_at=due)
    event = decide(facts(RunStatus.WAITING_EVENT, wait=waits), UNREAD)
    assert event is not None and event.reason is Reason.WAITING_FOR_EVENT and event.until == due
    assert "waits for event paid (times out at 2026-12-01 12:00:30Z)" in event.summary
    assert f"awooop runs signal p {RUN} paid" in event.next_action
    forever = decide(facts(RunStatus.WAITING_EVENT, wait=WaitFacts(kind="event", name="x")), READ)
    assert forever is not None and "(no timeout)" in forever.summary and forever.until is None


def test_a_wait_for_children_says_how_many_of_how_many_finished() -> None:
    due = NOW + timedelta(seconds=30)
    every = WaitFacts(kind="children", needed=3, children=3, finished=1)
    got = decide(facts(RunStatus.WAITING_EVENT, wait=every), READ)
    assert got is not None and got.reason is Reason.WAITING_FOR_CHILDREN and got.until is None
    assert got.summary == "waits for child runs: 1 of 3 children finished (no timeout)"
    assert f"awooop runs show p {RUN}" in got.next_action
    first = WaitFacts(kind="children", needed=2, children=5, finished=0, due_at=due)
    got = decide(facts(RunStatus.WAITING_EVENT, wait=first), READ)
    assert got is not None and got.until == due
    assert "0 of 5 children finished, needs 2 (times out at 2026-12-01 12:00:30Z)" in got.summary
