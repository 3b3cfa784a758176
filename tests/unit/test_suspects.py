"""Pure decisions about runs in flight on a worker that died: which become suspects, what a
death charges, how the run's state reads afterwards (awooop.runs.leases.rules, log.state)."""

from __future__ import annotations

from datetime import timedelta

import msgspec
import pytest

from awooop.core.events import RunClaimed, RunCompleted, RunFailed, RunRequeued, decode_event
from awooop.eventlog.state import MAX_ATTEMPTS_CODE, RunState, RunStatus, apply, decode_state
from awooop.runs.leases import Availability, availability, claim_event, reap_event
from awooop.runs.leases.rules import died_sharing
from awooop.runs.leases.suspects import requeued_for_isolation, workers_with_several
from awooop.worker.reclaim import ReclaimAction, reclaim_action
from tests.support.factories import T0, WORKER, replace, state_in

S = RunStatus
LATER = T0 + timedelta(seconds=10)
MUCH_LATER = T0 + timedelta(minutes=5)
TTL_S = 30.0


@pytest.mark.parametrize(
    ("leased", "suspected", "shared"),
    [(0, 0, False), (1, 0, True), (9, 0, True), (0, 1, True), (3, 2, True)],
)
def test_a_death_is_shared_when_the_worker_held_other_runs(
    leased: int, suspected: int, shared: bool
) -> None:
    """Runs it still holds, or runs its death already made suspects (reaped before this one):
    either way the worker held more than this run when it died."""
    assert died_sharing(leased, suspected) is shared


def test_a_shared_death_is_not_charged_and_makes_a_suspect() -> None:
    running = state_in(S.RUNNING)
    event = reap_event(running, MUCH_LATER, shared=True)
    assert isinstance(event, RunRequeued) and event.suspect
    assert (event.worker_id, event.attempt) == (WORKER, 1)
    assert "held other runs too" in event.reason and "not charged" in event.reason
    after = apply(running, event)
    assert after.status is S.PENDING and after.suspect_worker_id == WORKER
    # The attempt is not charged: the ceiling moves with it, the budget left is unchanged.
    assert (after.attempt_count, after.max_attempts) == (1, 4)
    assert after.max_attempts - after.attempt_count == running.max_attempts - 0
    assert requeued_for_isolation(event, after)


def test_a_shared_death_on_the_last_attempt_still_only_requeues() -> None:
    last = replace(state_in(S.RUNNING), attempt_count=3)
    event = reap_event(last, MUCH_LATER, shared=True)
    assert isinstance(event, RunRequeued) and event.suspect
    assert apply(last, event).max_attempts == 4


def test_a_death_alone_is_charged_as_before() -> None:
    running = state_in(S.RUNNING)
    event = reap_event(running, MUCH_LATER)
    assert isinstance(event, RunRequeued) and not event.suspect
    after = apply(running, event)
    assert (after.max_attempts, after.suspect_worker_id) == (3, None)
    assert not requeued_for_isolation(event, after)


def test_the_poison_run_fails_naming_itself_and_its_deaths_alone() -> None:
    """One shared death (uncharged), then it runs alone and kills its worker three times:
    FAILED E-RUN-004 at attempt 4 of 4, the reason naming the run and its three deaths alone,
    dead-lettered once (only the failure carries dead_letter)."""
    state = state_in(S.RUNNING)
    run_id = state.run_id
    events: list[RunRequeued | RunFailed] = []
    shared = True
    lone = 0
    while state.status is S.RUNNING:
        if not shared:
            lone += 1
        event = reap_event(state, MUCH_LATER, shared=shared, lone_deaths=lone)
        events.append(event)
        state = apply(state, event)
        if state.status is S.PENDING:
            # A suspect stays one: whoever claims it next runs it alone.
            assert state.suspect_worker_id == WORKER
            assert availability(state, MUCH_LATER, "worker-c") is Availability.SUSPECT
            state = apply(state, claim_event(state, MUCH_LATER, f"worker-{lone}", TTL_S))
            shared = False
    assert [type(e).__name__ for e in events] == [
        "RunRequeued",
        "RunRequeued",
        "RunRequeued",
        "RunFailed",
    ]
    assert [getattr(e, "suspect", None) for e in events[:3]] == [True, False, False]
    failed = events[-1]
    assert isinstance(failed, RunFailed) and failed.dead_letter
    assert failed.code == MAX_ATTEMPTS_CODE
    assert failed.reason.startswith(
        f"Max retry attempts exceeded (4 of 4): run {run_id} killed its worker 3 times "
        "while running alone; the lease of attempt 4 expired: worker worker-2"
    )
    assert (state.status, state.failure_reason) == (S.FAILED, failed.reason)
    assert sum(1 for e in events if isinstance(e, RunFailed) and e.dead_letter) == 1


def test_a_run_that_killed_its_worker_once_alone_says_once() -> None:
    last = replace(state_in(S.RUNNING), attempt_count=3)
    failed = reap_event(last, MUCH_LATER, lone_deaths=1)
    assert isinstance(failed, RunFailed)
    assert f"run {last.run_id} killed its worker once while running alone" in failed.reason


def test_an_innocent_suspect_completes_with_its_budget_whole() -> None:
    """In flight when another run killed the worker: requeued uncharged, runs alone, completes.
    attempt_count (the fence) counts both claims; max_attempts moved with the uncharged one."""
    running = state_in(S.RUNNING)
    suspect = apply(running, reap_event(running, MUCH_LATER, shared=True))
    alone = apply(suspect, claim_event(suspect, MUCH_LATER, "worker-b", TTL_S))
    done = apply(alone, RunCompleted(at=MUCH_LATER, worker_id="worker-b", attempt=2, result=1))
    assert (done.status, done.attempt_count, done.max_attempts) == (S.COMPLETED, 2, 4)
    assert done.max_attempts - done.attempt_count == running.max_attempts - 1


@pytest.mark.parametrize(
    ("now", "expected"),
    [(LATER, Availability.HELD), (MUCH_LATER, Availability.SUSPECT)],
)
def test_a_dispatchable_suspect_is_only_for_the_isolated_claim(
    now: object, expected: Availability
) -> None:
    pending = replace(
        state_in(S.PENDING), suspect_worker_id="worker-x", lease_until=T0 + timedelta(seconds=30)
    )
    assert availability(pending, now, WORKER) is expected  # type: ignore[arg-type]
    plain = replace(pending, suspect_worker_id=None)
    assert availability(plain, MUCH_LATER, WORKER) is Availability.CLAIMABLE


@pytest.mark.parametrize("deliveries", [1, 100])
def test_a_message_for_a_suspect_is_acknowledged(deliveries: int) -> None:
    """Postgres is where the isolated claim finds suspects; the message has nothing to do."""
    assert reclaim_action(Availability.SUSPECT, deliveries, 10) is ReclaimAction.ACK


def test_events_and_states_stored_before_suspects_existed_still_decode() -> None:
    old = decode_event(b'{"type":"RunRequeued","at":"2026-01-01T00:00:00Z","attempt":1}')
    assert isinstance(old, RunRequeued) and old.suspect is False
    state = state_in(S.COMPLETED)
    stored = msgspec.json.encode(msgspec.structs.asdict(state))
    without = msgspec.json.decode(stored)
    del without["suspect_worker_id"]
    assert decode_state(msgspec.json.encode(without)) == state
    assert isinstance(state, RunState)


def test_a_claim_keeps_the_suspect_mark() -> None:
    suspect = replace(state_in(S.PENDING), suspect_worker_id="worker-x")
    claimed = apply(suspect, claim_event(suspect, LATER, WORKER, TTL_S))
    assert isinstance(claim_event(suspect, LATER, WORKER, TTL_S), RunClaimed)
    assert claimed.suspect_worker_id == "worker-x"


def test_a_batch_with_several_runs_of_one_worker_knows_its_death_was_shared() -> None:
    base = state_in(S.RUNNING)
    batch = [
        replace(base, worker_id="w-1"),
        replace(base, worker_id="w-1"),
        replace(base, worker_id="w-2"),
        replace(base, worker_id=None),
    ]
    assert workers_with_several(batch) == frozenset({"w-1"})
    assert workers_with_several([]) == frozenset()


def test_a_run_that_only_sometimes_kills_is_charged_only_for_its_deaths_alone() -> None:
    """Shared death (uncharged), a death alone (charged), then an attempt alone that completes:
    COMPLETED with one charged attempt, the ceiling moved once."""
    running = state_in(S.RUNNING)
    suspect = apply(running, reap_event(running, MUCH_LATER, shared=True))
    alone = apply(suspect, claim_event(suspect, MUCH_LATER, "worker-b", TTL_S))
    charged = reap_event(alone, MUCH_LATER)
    assert isinstance(charged, RunRequeued) and not charged.suspect
    again = apply(alone, charged)
    assert again.suspect_worker_id == WORKER  # still runs alone
    last = apply(again, claim_event(again, MUCH_LATER, "worker-c", TTL_S))
    done = apply(last, RunCompleted(at=MUCH_LATER, worker_id="worker-c", attempt=3, result=1))
    assert (done.status, done.attempt_count, done.max_attempts) == (S.COMPLETED, 3, 4)
