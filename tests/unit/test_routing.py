"""Worker routes (awooop.runs.routing): which runs a worker serves, its options, the routing
notice, and blocked_on's no_worker_for_contract (awooop.runs.blocked.decide)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from awooop.commands.doctor_flow import blocked_check
from awooop.commands.doctor_results import FAIL, OK
from awooop.core.errors import ConfigError
from awooop.eventlog.state import RunStatus
from awooop.runs.blocked import Reason, RunFacts, ShardFacts, decide
from awooop.runs.routing import ALL, Routes, notice, notice_served, routes_of

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
READ = ShardFacts(shard=1, known=True, readers=2, workers=2)


def test_a_worker_without_routes_serves_every_run_and_passes_nulls() -> None:
    assert ALL.everything and ALL == routes_of(None, None) == routes_of([], [])
    assert ALL.serves("p", "c") and ALL.serves("p", None)
    assert ALL.params == (None, None, None)  # no version yet: the worker sets its own
    assert ALL.describe() == "every contract of every project"


def test_contracts_and_projects_narrow_what_a_worker_serves() -> None:
    c1 = routes_of(["c1", " c1 ", "c0"], None)
    assert c1 == Routes(contracts=("c0", "c1")) and c1.params == (["c0", "c1"], None, None)
    assert c1.serves("p", "c1") and c1.serves("q", "c0")
    assert not c1.serves("p", "c2")
    assert not c1.serves("p", None)  # a run without a contract: only for workers without one
    tenant = routes_of(None, ["p"])
    assert tenant.serves("p", None) and tenant.serves("p", "c9") and not tenant.serves("q", "c1")
    both = routes_of(["c1"], ["p", "r"])
    assert both.serves("r", "c1") and not both.serves("q", "c1") and not both.serves("p", "c2")
    assert both.describe() == "c1 of p, r"


@pytest.mark.parametrize("bad", ["", "   ", "x" * 201, "a\nb"])
def test_a_blank_or_oversized_name_is_refused(bad: str) -> None:
    with pytest.raises(ConfigError) as raised:
        routes_of([bad], None)
    assert raised.value.code == "E-CONFIG-001" and "--contract" in str(raised.value)
    with pytest.raises(ConfigError):
        routes_of(None, ["ok", bad])


def test_a_routing_notice_rings_only_workers_that_serve_its_runs() -> None:
    c1, c2 = routes_of(["c1"], None), routes_of(["c2"], ["p"])
    payload = notice("p", "c2")
    assert notice_served(c2, payload) and notice_served(ALL, payload)
    assert not notice_served(c1, payload)
    assert not notice_served(c2, notice("q", "c2"))
    assert notice_served(ALL, notice("p", None)) and not notice_served(c1, notice("p", None))
    assert not notice_served(ALL, "garbage without a separator")
    run_id = uuid.UUID(int=7)
    assert notice("p", "c2", run_id) == f"p\nc2\n{run_id}"
    assert notice_served(c2, notice("p", "c2", run_id)) and not notice_served(
        c1, notice("p", "c2", run_id)
    )


def facts(**changes: object) -> RunFacts:
    base: dict[str, object] = {
        "run_id": uuid.UUID(int=1),
        "project_id": "p",
        "status": RunStatus.PENDING,
        "attempt_count": 0,
        "max_attempts": 3,
        "worker_id": None,
        "lease_until": None,
        "heartbeat_at": None,
        "waiting_for": None,
        "approval_expires_at": None,
        "failure_reason": None,
        "failure_code": None,
        "updated_at": NOW - timedelta(minutes=1),
        "now": NOW,
        "contract_id": "c2",
    }
    base.update(changes)
    return RunFacts(**base)  # type: ignore[arg-type]


def test_a_waiting_run_whose_contract_no_live_worker_serves_says_so() -> None:
    got = decide(facts(served=False), READ)
    assert got is not None and got.reason is Reason.NO_WORKER_FOR_CONTRACT
    assert "no live worker serves contract c2 of p" in got.summary
    assert "--contract c2" in got.next_action
    retried = decide(facts(served=False, attempt_count=1, status=RunStatus.RESUMED), READ)
    assert retried is not None and retried.reason is Reason.NO_WORKER_FOR_CONTRACT
    # Served, or unknown (no live worker process registered): the other rows decide.
    for served in (True, None):
        other = decide(facts(served=served), READ)
        assert other is not None and other.reason is Reason.PENDING_WORKERS_BUSY
    # No worker at all reads the shard: that is what blocks it.
    unread = ShardFacts(shard=1, known=True, readers=0, workers=0)
    nobody = decide(facts(served=False), unread)
    assert nobody is not None and nobody.reason is Reason.PENDING_NO_WORKER
    # A pause, a dead letter or a full key still come first.
    dead = decide(facts(served=False, dead_lettered=True), READ)
    assert dead is not None and dead.reason is Reason.PENDING_DEAD_LETTERED
    # Only waiting runs: a running run is running.
    running = decide(
        facts(served=False, status=RunStatus.RUNNING, lease_until=NOW + timedelta(seconds=5)),
        READ,
    )
    assert running is not None and running.reason is Reason.RUNNING


def test_doctor_fails_while_runs_wait_for_a_contract_no_worker_serves() -> None:
    waiting = {("p", "no_worker_for_contract"): 2, ("q", "pending_workers_busy"): 1}
    line = blocked_check(waiting)
    assert (
        line.status == FAIL and "2 run(s) wait for a contract no live worker serves" in line.detail
    )
    assert "projects p" in line.detail and "--contract" in line.fix
    assert blocked_check({("q", "pending_workers_busy"): 1}).status == OK
