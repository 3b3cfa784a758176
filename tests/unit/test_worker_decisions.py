"""Pure decisions of the worker runtime: availability, reap, fence, failure, approval tokens."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import pytest

from awooop.cli import build_parser
from awooop.core.errors import (
    ApprovalExpiredError,
    DatabaseUnavailableError,
    HandlerError,
    InvalidInputError,
    LeaseLostError,
    ModelUnavailableError,
    RedisUnavailableError,
)
from awooop.core.events import RunFailed, RunRequeued
from awooop.eventlog.state import MAX_ATTEMPTS_CODE, MAX_ATTEMPTS_REASON, RunStatus, apply
from awooop.runs import approvals
from awooop.runs.leases import (
    Availability,
    Fence,
    Verdict,
    availability,
    claim_event,
    fence_problem,
    lease_expiry,
    notice_verdict,
    reap_event,
)
from awooop.worker.outcomes import Outcome, failure_of, infrastructure_failure
from awooop.worker.reclaim import (
    ReclaimAction,
    dead_letter_reason,
    held_delivery_count,
    reclaim_action,
)
from tests.support.factories import T0, WORKER, replace, state_in

S = RunStatus
LATER = T0 + timedelta(seconds=10)
MUCH_LATER = T0 + timedelta(minutes=5)


@pytest.mark.parametrize(
    ("status", "now", "worker", "expected"),
    [
        (S.PENDING, LATER, WORKER, Availability.CLAIMABLE),
        (S.RESUMED, LATER, WORKER, Availability.CLAIMABLE),
        (S.RUNNING, LATER, WORKER, Availability.HELD_BY_ME),
        (S.RUNNING, LATER, "worker-b", Availability.HELD),
        (S.RUNNING, MUCH_LATER, "worker-b", Availability.EXPIRED),
        (S.RUNNING, MUCH_LATER, WORKER, Availability.EXPIRED),
        (S.WAITING_TOOL, LATER, "worker-b", Availability.HELD),
        (S.WAITING_TOOL, MUCH_LATER, "worker-b", Availability.EXPIRED),
        (S.WAITING_APPROVAL, MUCH_LATER, "worker-b", Availability.AWAITING_APPROVAL),
        (S.COMPLETED, LATER, WORKER, Availability.FINISHED),
        (S.FAILED, LATER, WORKER, Availability.FINISHED),
        (S.CANCELLED, LATER, WORKER, Availability.FINISHED),
    ],
)
def test_availability(
    status: RunStatus, now: datetime, worker: str, expected: Availability
) -> None:
    assert availability(state_in(status), now, worker) is expected


def test_an_unknown_run_is_missing() -> None:
    assert availability(None, T0, WORKER) is Availability.MISSING


def test_a_lease_ending_exactly_now_is_expired() -> None:
    running = state_in(S.RUNNING)
    assert running.lease_until is not None
    assert availability(running, running.lease_until, "other") is Availability.EXPIRED


def test_reap_requeues_while_attempts_remain_then_fails() -> None:
    running = state_in(S.RUNNING)
    assert running.attempt_count == 1 and running.max_attempts == 3
    event = reap_event(running, LATER)
    assert isinstance(event, RunRequeued) and event.attempt == 1
    last = replace(running, attempt_count=3)
    failed = reap_event(last, LATER)
    assert isinstance(failed, RunFailed)
    assert failed.code == MAX_ATTEMPTS_CODE
    assert failed.reason.startswith(f"{MAX_ATTEMPTS_REASON} (3 of 3): ")
    assert failed.reason.startswith("Max retry attempts exceeded")
    assert apply(last, failed).status is S.FAILED


def test_an_expired_lease_is_recorded_with_its_worker_and_last_renewal() -> None:
    """R-19: the requeue and the final failure say whose lease expired and since when nothing
    renewed it; only the failure dead-letters the run."""
    running = replace(state_in(S.RUNNING), heartbeat_at=T0 + timedelta(seconds=4))
    requeued = reap_event(running, LATER)
    assert isinstance(requeued, RunRequeued)
    assert (requeued.worker_id, requeued.last_renewal_at) == (WORKER, running.heartbeat_at)
    assert requeued.reason == lease_expiry(running)
    assert lease_expiry(running) == (
        f"the lease of attempt 1 expired: worker {WORKER} neither renewed it after "
        "2026-01-01T00:00:04.000+00:00 nor released it (the worker process died, or was cut "
        "off from Postgres or stalled)"
    )
    last = replace(running, attempt_count=3)
    failed = reap_event(last, LATER)
    assert isinstance(failed, RunFailed)
    assert (failed.worker_id, failed.attempt, failed.dead_letter) == (WORKER, 3, True)
    assert failed.last_renewal_at == running.heartbeat_at
    assert f"worker {WORKER} neither renewed it" in failed.reason
    assert "attempt 3 expired" in failed.reason
    after = apply(last, failed)  # the expired attempt's names pass apply's fence
    assert (after.status, after.failure_code, after.worker_id) == (S.FAILED, "E-RUN-004", None)
    assert after.failure_reason == failed.reason


def test_requeues_stored_before_they_named_the_worker_still_apply() -> None:
    running = state_in(S.RUNNING)
    old = RunRequeued(at=LATER, attempt=1)  # as stored before worker_id existed
    assert apply(running, old).status is S.PENDING
    with pytest.raises(LeaseLostError):
        apply(running, RunRequeued(at=LATER, attempt=1, worker_id="someone-else"))


def test_the_reap_event_is_legal_for_every_leased_state() -> None:
    for status in (S.RUNNING, S.WAITING_TOOL):
        state = state_in(status)
        assert apply(state, reap_event(state, LATER)).status is S.PENDING


def test_claim_event_takes_the_lease_from_the_database_clock() -> None:
    pending = state_in(S.PENDING)
    event = claim_event(pending, LATER, "w9", 30.0)
    assert event.attempt == pending.attempt_count + 1
    assert event.lease_until == LATER + timedelta(seconds=30)
    running = apply(pending, event)
    assert (running.status, running.worker_id) == (S.RUNNING, "w9")


def test_fence_accepts_only_the_live_holding_attempt() -> None:
    running = state_in(S.RUNNING)
    assert fence_problem(running, LATER, WORKER, 1) is None
    problem = fence_problem(running, LATER, "worker-b", 1)
    assert problem is not None and "no longer holds" in problem
    assert fence_problem(running, LATER, WORKER, 2) is not None
    assert fence_problem(running, MUCH_LATER, WORKER, 1) == "the lease expired"
    cancelled = replace(running, status=S.CANCELLED)
    assert fence_problem(cancelled, LATER, WORKER, 1) == "the run is CANCELLED"


def fence_of(status: RunStatus, worker: str | None = WORKER, attempt: int = 1) -> Fence:
    running = state_in(S.RUNNING)
    return Fence(status, worker, attempt, running.lease_until)


@pytest.mark.parametrize(
    ("fence", "now", "expected"),
    [
        (fence_of(S.RUNNING), LATER, Verdict.IGNORE),  # the notice lied: the attempt holds it
        (fence_of(S.WAITING_TOOL), LATER, Verdict.IGNORE),
        (fence_of(S.CANCELLED, worker=None), LATER, Verdict.CANCELLED),
        (fence_of(S.RUNNING, worker="worker-b", attempt=2), LATER, Verdict.LOST),
        (fence_of(S.RUNNING, attempt=2), LATER, Verdict.LOST),  # a later attempt of this worker
        (fence_of(S.RUNNING), MUCH_LATER, Verdict.LOST),  # the lease ran out
        (fence_of(S.PENDING, worker=None), LATER, Verdict.LOST),  # reaped
        (fence_of(S.COMPLETED, worker=None), LATER, Verdict.LOST),
        (None, LATER, Verdict.LOST),
    ],
)
def test_a_cancel_notice_stops_an_attempt_only_for_what_the_row_says(
    fence: Fence | None, now: datetime, expected: Verdict
) -> None:
    verdict, why = notice_verdict(fence, now, WORKER, 1)
    assert verdict is expected and why


def test_the_fence_of_a_row_is_judged_like_the_row() -> None:
    """One rule: the columns a notice's check reads decide as the whole row does."""
    for state in (state_in(s) for s in S):
        fence = Fence(state.status, state.worker_id, state.attempt_count, state.lease_until)
        for now in (LATER, MUCH_LATER):
            for worker, attempt in ((WORKER, 1), ("worker-b", 1), (WORKER, 2)):
                assert fence_problem(fence, now, worker, attempt) == fence_problem(
                    state, now, worker, attempt
                )


def test_handler_exceptions_map_to_a_code_and_a_reason() -> None:
    assert failure_of(ValueError("bad input")) == (HandlerError.code, "ValueError: bad input")
    assert failure_of(KeyError()) == (HandlerError.code, "KeyError")
    code, reason = failure_of(ApprovalExpiredError())
    assert code == "E-APPROVAL-002" and reason.startswith("ApprovalExpiredError")
    assert len(failure_of(RuntimeError("x" * 5000))[1]) == 2000


@pytest.mark.parametrize(
    ("exc", "abandoned"),
    [
        (DatabaseUnavailableError("restart"), True),
        (RedisUnavailableError("gone"), True),
        (HandlerError("the handler's own"), False),
        (ModelUnavailableError("model down"), False),  # fails the run, with its reason
        (ConnectionRefusedError("the handler's own call"), False),
    ],
)
def test_only_the_runtimes_own_stores_being_down_abandons_an_attempt(
    exc: BaseException, abandoned: bool
) -> None:
    assert infrastructure_failure(exc) is abandoned


def test_only_a_failed_last_write_leaves_the_message_pending() -> None:
    assert [o for o in Outcome if not o.ack] == [Outcome.ERROR]


def test_tokens_are_random_and_stored_as_a_hash() -> None:
    tokens = {approvals.new_token() for _ in range(100)}
    assert len(tokens) == 100
    token = tokens.pop()
    assert len(token) >= 40
    digest = approvals.hash_token(token)
    assert len(digest) == 64 and token not in digest
    assert approvals.hash_token(token) == digest != approvals.hash_token(token + "x")


def test_the_cli_reads_back_every_token_it_is_handed() -> None:
    # A token starting with "-" would be read by argparse as an option (1 in 64 before the prefix).
    parser = build_parser()
    for _ in range(500):
        token = approvals.new_token()
        args = parser.parse_args(["runs", "approve", "p", str(uuid.uuid4()), "--token", token])
        assert args.token == token


@pytest.mark.parametrize("name", ["", "x" * 201])
def test_approval_names_are_bounded(name: str) -> None:
    with pytest.raises(InvalidInputError):
        approvals.check_name(name)


A = Availability


@pytest.mark.parametrize(
    ("seen", "deliveries", "expected"),
    [
        (A.FINISHED, 1, ReclaimAction.ACK),
        (A.FINISHED, 99, ReclaimAction.ACK),
        (A.MISSING, 1, ReclaimAction.ACK),
        (A.AWAITING_APPROVAL, 1, ReclaimAction.ACK),
        (A.HELD_BY_ME, 1, ReclaimAction.ACK),
        (A.HELD, 10, ReclaimAction.LEAVE),
        (A.HELD, 11, ReclaimAction.ACK),
        (A.CLAIMABLE, 10, ReclaimAction.TAKE),
        (A.EXPIRED, 2, ReclaimAction.TAKE),
        (A.CLAIMABLE, 11, ReclaimAction.DEAD_LETTER),
        # The attempts decide for an expired lease (reap_event), never the deliveries: a
        # duplicate message reclaimed while a long attempt held the run must not fail it.
        (A.EXPIRED, 11, ReclaimAction.TAKE),
        (A.EXPIRED, 99, ReclaimAction.TAKE),
    ],
)
def test_reclaim_reconciles_with_the_database(
    seen: Availability, deliveries: int, expected: ReclaimAction
) -> None:
    assert reclaim_action(seen, deliveries, max_deliveries=10) is expected


def test_every_availability_has_a_reclaim_action() -> None:
    for seen in Availability:
        for deliveries in (1, 100):
            assert reclaim_action(seen, deliveries, 10) in ReclaimAction
    assert "delivered 11 times (limit 10)" in dead_letter_reason(11, 10)


def test_deliveries_while_a_live_lease_elsewhere_holds_the_run_are_taken_back() -> None:
    """As decisions: a duplicate message for a run held by a long attempt
    is reclaimed once per lease TTL, many more times than the limit. Each of those reclaims
    leaves it pending and sets its count back, so when the attempt then ends unfinished the
    next reclaim takes the run (its attempts decide) instead of dead-lettering it."""
    deliveries = 1  # read once by a worker that found the run held
    for _ in range(25):
        deliveries += 1  # XAUTOCLAIM counts a delivery
        assert reclaim_action(A.HELD, deliveries, max_deliveries=10) is ReclaimAction.LEAVE
        deliveries = held_delivery_count(deliveries)
    assert deliveries == 1
    assert reclaim_action(A.EXPIRED, deliveries + 1, max_deliveries=10) is ReclaimAction.TAKE
    assert reclaim_action(A.CLAIMABLE, deliveries + 1, max_deliveries=10) is ReclaimAction.TAKE
    assert held_delivery_count(1) == 1
    assert held_delivery_count(7) == 6
