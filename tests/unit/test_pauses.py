"""Pauses as pure decisions: the scope a command names, which runs a pause holds, what resumes
it, how ``blocked_on`` says it, what a worker does with a paused run's message, and the resume
doorbell's bound on the polling path."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from awooop.commands.doctor_flow import blocked_check
from awooop.core.errors import InvalidInputError
from awooop.eventlog.state import RunStatus
from awooop.runs.blocked import Reason, RunFacts, ShardFacts, decide
from awooop.runs.leases import Availability
from awooop.runs.pause_rules import (
    Pause,
    Scope,
    describe_scope,
    holds,
    resume_command,
    scope_of,
)
from awooop.worker.reclaim import ReclaimAction, reclaim_action
from awooop.worker.resume_bell import ResumeBell

NOW = datetime(2026, 12, 5, 4, 0, tzinfo=UTC)


def a_pause(scope: Scope, key: str = "", project: str = "p", **more: object) -> Pause:
    return Pause(
        pause_id=str(uuid.uuid4()),
        project_id=project,
        scope=scope,
        scope_key=key,
        reason="",
        paused_by="cli:ops",
        paused_at=NOW,
        **more,  # type: ignore[arg-type]
    )


def test_a_command_names_the_project_a_channel_or_a_contract() -> None:
    assert scope_of() == (Scope.PROJECT, "")
    assert scope_of(channel="telegram") == (Scope.CHANNEL, "telegram")
    assert scope_of(contract="triage") == (Scope.CONTRACT, "triage")
    with pytest.raises(InvalidInputError, match="not both"):
        scope_of(channel="telegram", contract="triage")
    with pytest.raises(InvalidInputError):
        scope_of(channel="")
    with pytest.raises(InvalidInputError):
        scope_of(contract="x" * 201)


def test_a_pause_holds_the_runs_of_its_scope_while_active() -> None:
    project, channel, contract = (
        a_pause(Scope.PROJECT),
        a_pause(Scope.CHANNEL, "telegram"),
        a_pause(Scope.CONTRACT, "triage"),
    )
    assert holds(project, "api", None)
    assert holds(channel, "telegram", "triage") and not holds(channel, "api", "triage")
    assert holds(contract, "api", "triage") and not holds(contract, "api", None)
    assert not holds(contract, "triage", "other")  # a channel named like the contract
    ended = a_pause(Scope.PROJECT, resumed_at=NOW, resumed_by="cli:ops")
    assert not ended.active and not holds(ended, "api", None)


def test_the_resume_command_names_the_scope() -> None:
    assert resume_command("p", Scope.PROJECT, "") == "awooop projects resume p"
    assert resume_command("p", Scope.CHANNEL, "line") == "awooop projects resume p --channel line"
    assert resume_command("p", Scope.CONTRACT, "t") == "awooop projects resume p --contract t"
    assert describe_scope(Scope.CHANNEL, "line") == "channel line"


def facts(**more: object) -> RunFacts:
    return RunFacts(
        run_id=uuid.uuid4(),
        project_id="p",
        status=RunStatus.PENDING,
        attempt_count=0,
        max_attempts=3,
        worker_id=None,
        lease_until=None,
        heartbeat_at=None,
        waiting_for=None,
        approval_expires_at=None,
        failure_reason=None,
        failure_code=None,
        updated_at=NOW - timedelta(minutes=1),
        now=NOW,
        **more,  # type: ignore[arg-type]
    )


def test_blocked_on_says_paused_before_asking_about_workers() -> None:
    unread = ShardFacts(shard=0, known=True, readers=0)
    held = facts(
        paused_scope=Scope.CHANNEL,
        paused_key="telegram",
        paused_by="cli:ops",
        paused_reason="provider outage",
    )
    found = decide(held, unread)
    assert found is not None and found.reason is Reason.PAUSED
    assert "channel telegram of p paused by cli:ops: provider outage" in found.summary
    assert found.next_action == "awooop projects resume p --channel telegram"
    dead = decide(facts(paused_scope=Scope.PROJECT, dead_lettered=True), unread)
    assert dead is not None and dead.reason is Reason.PENDING_DEAD_LETTERED
    free = decide(facts(), unread)
    assert free is not None and free.reason is Reason.PENDING_NO_WORKER


def test_a_paused_runs_message_is_done_with() -> None:
    # resuming wakes the polling path, which finds the run in Postgres
    assert reclaim_action(Availability.PAUSED, 1, 3) is ReclaimAction.ACK
    assert reclaim_action(Availability.PAUSED, 9, 3) is ReclaimAction.ACK


def test_the_resume_bell_lowers_the_polling_age_until_a_poll_with_room_finds_nothing() -> None:
    bell = ResumeBell()
    assert bell.min_age(60.0) == 60.0 and not bell.draining
    bell.ring()
    rung_at = bell._since
    assert rung_at is not None and bell.rung.is_set()
    assert bell.min_age(60.0, now=rung_at) == 0.0
    assert bell.min_age(60.0, now=rung_at + 2.5) == 2.5  # runs touched since the ring wait
    assert bell.min_age(1.0, now=rung_at + 2.5) == 1.0  # never above the normal bound
    bell.ring()  # a second ring during the drain keeps the first one's time
    assert bell.min_age(60.0, now=rung_at + 1.0) == 1.0
    bell.polled(4, had_room=True)
    bell.polled(0, had_room=False)  # no free slot: nothing learned
    assert bell.draining
    bell.polled(0, had_room=True)
    assert not bell.draining and bell.min_age(60.0) == 60.0


def test_doctor_names_the_projects_with_paused_runs() -> None:
    found = blocked_check({("shop", "paused"): 3, ("shop", "running"): 1, ("crm", "running"): 2})
    assert found.status == "OK"
    assert found.detail == "3 paused, 3 running; paused: shop (awooop projects pauses)"
    assert "paused" not in blocked_check({("crm", "running"): 2}).detail


def test_a_deferred_claim_is_owed_one_start_at_any_age() -> None:
    bell = ResumeBell()
    bell.owe()
    bell.owe()
    assert bell.rung.is_set() and bell.draining
    assert bell.min_age(60.0) == 0.0  # runs of every age, fresh ones too
    bell.polled(0, had_room=False)  # the slots were full: still owed
    assert bell.owed == 2 and bell.min_age(60.0) == 0.0
    bell.polled(1, had_room=True)
    assert bell.owed == 1 and bell.draining
    bell.polled(3, had_room=True)  # more taken than owed: never below zero
    assert bell.owed == 0 and not bell.draining and bell.min_age(60.0) == 60.0
    bell.owe()
    bell.polled(0, had_room=True)  # room and nothing to take: the debt is void
    assert bell.owed == 0 and not bell.draining
