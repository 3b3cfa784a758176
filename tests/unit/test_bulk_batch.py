"""A bulk operation's batch, pure: which locked runs still match the filter, and the event each
gets (awooop/runs/bulk_batch.py)."""

from __future__ import annotations

from datetime import timedelta

from awooop.core.errors import IllegalTransitionError
from awooop.core.events import RunCancelled, RunRetried
from awooop.eventlog.state import RunStatus
from awooop.runs import listing
from awooop.runs.bulk import for_action
from awooop.runs.bulk_batch import event_for, matches, refusal
from tests.support.factories import T0, replace, state_in


def test_a_locked_run_matches_only_while_every_part_of_the_filter_still_holds() -> None:
    failed = replace(state_in(RunStatus.FAILED), project_id="p1", created_at=T0)
    retry = for_action("retry", listing.RunFilter(project="p1", channel="api", since=T0))
    assert matches(retry, failed)
    assert not matches(retry, replace(failed, status=RunStatus.COMPLETED))  # retried meanwhile
    assert not matches(retry, replace(failed, project_id="p2"))
    assert not matches(retry, replace(failed, channel_type="slack"))
    assert not matches(retry, replace(failed, created_at=T0 - timedelta(seconds=1)))
    by_key = for_action("retry", listing.RunFilter(q=str(failed.run_id)))
    assert matches(by_key, failed)
    assert matches(for_action("retry", listing.RunFilter(q=failed.provider_event_id)), failed)
    assert not matches(for_action("retry", listing.RunFilter(q="another")), failed)
    cancel = for_action("cancel", listing.RunFilter())
    assert matches(cancel, state_in(RunStatus.PENDING))
    assert not matches(cancel, state_in(RunStatus.CANCELLED))


def test_a_retry_grants_extra_attempts_and_a_cancel_carries_its_reason() -> None:
    failed = state_in(RunStatus.FAILED)
    retried = event_for("retry", "ana", failed, T0, extra_attempts=2, reason="")
    assert isinstance(retried, RunRetried)
    assert (retried.actor, retried.max_attempts) == ("ana", failed.attempt_count + 2)
    default = event_for("retry", "ana", failed, T0, extra_attempts=None, reason="")
    assert isinstance(default, RunRetried) and default.max_attempts == failed.attempt_count + 3
    cancelled = event_for(
        "cancel", "bo", state_in(RunStatus.PENDING), T0, extra_attempts=None, reason="dup"
    )
    assert isinstance(cancelled, RunCancelled)
    assert (cancelled.actor, cancelled.reason) == ("bo", "dup")


def test_a_refusal_keeps_the_code_and_a_bounded_message() -> None:
    failed = state_in(RunStatus.FAILED)
    exc = IllegalTransitionError("x" * 400)
    kept = refusal(failed.run_id, exc)
    assert kept["run_id"] == str(failed.run_id) and kept["code"] == exc.code
    assert len(kept["message"]) == 300
