"""Handler versions, pure parts: what a version may be, which one a worker runs (given,
declared, derived), the rule a contract's required versions apply, blocked_on's
no_worker_for_version, and each attempt's version on the run's timeline."""

from __future__ import annotations

import importlib.util
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from awooop.commands.doctor_flow import blocked_check
from awooop.commands.doctor_results import FAIL
from awooop.commands.runs_render import render_attempts
from awooop.core.config import load_settings
from awooop.core.errors import HandlerVersionError
from awooop.core.events import RunClaimed, decode_event
from awooop.eventlog.state import RunStatus
from awooop.http.console_timeline import view
from awooop.projections.timeline import NEWER_FIELDS, TimelineLine, attempts
from awooop.runs.blocked import Reason, RunFacts, ShardFacts, decide, describe
from awooop.runs.routing import ALL, routes_of
from awooop.runs.versions import VersionWait, accepts, check_version, check_versions
from awooop.worker import handler_version
from awooop.worker.handler_version import derived_version, version_of, versioned

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
READ = ShardFacts(shard=1, known=True, readers=2, workers=2)


@pytest.mark.parametrize("good", ["v2", "1.4.0", "git:3f2a9c1", "2026-12-06+build.7", "a" * 64])
def test_a_version_is_bounded_plain_text(good: str) -> None:
    assert check_version(good) == good


@pytest.mark.parametrize("bad", ["", " v2", "v 2", "-v2", "v2\n", "x" * 65, "vé", 2, None])
def test_anything_else_is_refused_with_its_code(bad: Any) -> None:
    with pytest.raises(HandlerVersionError) as raised:
        check_version(bad, "--handler-version")
    assert raised.value.code == "E-VERSION-001" and raised.value.http_status == 400
    assert "--handler-version" in raised.value.message


def test_a_contract_accepts_one_to_sixteen_versions_without_repeats() -> None:
    assert check_versions(["v2", "v1", "v2"]) == ("v2", "v1")
    for bad in ([], [f"v{i}" for i in range(17)], "v2", ["v1", "bad one"]):
        with pytest.raises(HandlerVersionError):
            check_versions(bad)


def test_the_rule_of_the_claim_statements() -> None:
    assert accepts(None, "v1")  # no requirement: every worker
    assert accepts(("v1", "v2"), "v2") and not accepts(("v2",), "v1")
    assert accepts(("v2",), None)  # a statement that runs nothing (the reaper): not tested


async def handle(run: Any) -> None:
    return None


def test_a_given_version_wins_over_a_declared_one_which_wins_over_the_derived_one() -> None:
    derived = derived_version(handle)
    assert derived.startswith("sha256:") and len(derived) == len("sha256:") + 12
    assert version_of(handle) == derived == derived_version(handle)  # stable
    assert version_of(handle, "v7") == "v7"
    with pytest.raises(HandlerVersionError):
        version_of(handle, "")  # given, but empty

    async def declared(run: Any) -> None:
        return None

    declared.__awooop_version__ = "v3"  # type: ignore[attr-defined]
    assert version_of(declared) == "v3" and version_of(declared, "v4") == "v4"
    declared.__awooop_version__ = "not a version"  # type: ignore[attr-defined]
    with pytest.raises(HandlerVersionError) as raised:
        version_of(declared)
    assert handler_version.ATTRIBUTE in raised.value.message


def _module(path: Path, name: str, source: str) -> ModuleType:
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_the_derived_version_follows_the_handlers_module_source(tmp_path: Path) -> None:
    body = "async def handle(run):\n    return {}\n"
    try:
        one = _module(tmp_path / "v_one.py", "v_one", body)
        same = _module(tmp_path / "v_same.py", "v_same", body)
        other = _module(tmp_path / "v_other.py", "v_other", body + "# a change\n")
        declared = _module(tmp_path / "v_decl.py", "v_decl", '__awooop_version__ = "m1"\n' + body)
        assert derived_version(one.handle) == derived_version(same.handle)
        assert derived_version(one.handle) != derived_version(other.handle)
        assert version_of(declared.handle) == "m1"  # declared on the module
    finally:
        for name in ("v_one", "v_same", "v_other", "v_decl"):
            sys.modules.pop(name, None)


def test_a_worker_takes_the_setting_unless_its_routes_carry_a_version() -> None:
    settings = load_settings({}, handler_version="2026.12")
    assert versioned(ALL, handle, settings).version == "2026.12"
    given = routes_of(["c1"], None, "v9")
    assert versioned(given, handle, settings) is given
    assert versioned(ALL, handle, load_settings({})).version == derived_version(handle)
    with pytest.raises(HandlerVersionError):
        versioned(ALL, handle, load_settings({}, handler_version="two words"))
    assert given.params == (["c1"], None, "v9")
    assert given.describe() == "c1 of every project, handler version v9"


def facts(**fields: Any) -> RunFacts:
    base: dict[str, Any] = {
        "run_id": "00000000-0000-0000-0000-000000000001",
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
        "updated_at": NOW,
        "now": NOW,
        "contract_id": "triage",
    }
    return RunFacts(**(base | fields))


def wait(accepted: tuple[str, ...], running: tuple[str, ...] | None) -> VersionWait:
    return VersionWait(project_id="p", contract_id="triage", accepted=accepted, running=running)


def test_blocked_on_says_no_worker_for_version_when_no_live_worker_runs_an_accepted_one() -> None:
    got = decide(facts(versions=wait(("v2", "v3"), ("v1",))), READ)
    assert got is not None and got.reason is Reason.NO_WORKER_FOR_VERSION
    assert "contract triage of p accepts handler version(s) v2, v3" in got.summary
    assert "the live workers that serve it run v1" in got.summary
    assert "--handler-version v3" in got.next_action
    assert describe(got).startswith("no_worker_for_version: ")
    retried = decide(facts(status=RunStatus.RESUMED, versions=wait(("v2",), ("v1",))), READ)
    assert retried is not None and retried.reason is Reason.NO_WORKER_FOR_VERSION
    for fine in (wait(("v1", "v2"), ("v1",)), wait(("v2",), None)):  # taken, or no one alive
        other = decide(facts(versions=fine), READ)
        assert other is not None and other.reason is Reason.PENDING_WORKERS_BUSY
    # What blocks it more comes first: no worker at all, or none of its contract.
    unserved = decide(facts(served=False, versions=wait(("v2",), ("v1",))), READ)
    assert unserved is not None and unserved.reason is Reason.NO_WORKER_FOR_CONTRACT
    running = decide(
        facts(
            status=RunStatus.RUNNING,
            lease_until=NOW + timedelta(seconds=5),
            versions=wait(("v2",), ("v1",)),
        ),
        READ,
    )
    assert running is not None and running.reason is Reason.RUNNING


def test_doctor_fails_on_runs_waiting_for_a_version() -> None:
    check = blocked_check({("p", "no_worker_for_version"): 2, ("q", "running"): 1})
    assert check.status == FAIL and "2 run(s) wait for a handler version" in check.detail


def line(version: int, event_type: str, attempt: int, **detail: Any) -> TimelineLine:
    return TimelineLine(
        version=version,
        at=NOW + timedelta(seconds=version),
        event_type=event_type,
        attempt=attempt,
        worker_id=f"w{attempt}" if attempt else None,
        trace_id=None,
        actor=None,
        detail=detail,
    )


def test_each_attempt_shows_the_version_its_claim_recorded() -> None:
    lines = [
        line(1, "RunCreated", 0),
        line(2, "RunClaimed", 1, handler_version="v1"),
        line(3, "LeaseReleased", 1),
        line(4, "RunClaimed", 2, handler_version="v2"),
        line(5, "RunCompleted", 2),
        line(6, "RunClaimed", 3),  # stored before the field existed
    ]
    found = attempts(lines)
    assert [(a.attempt, a.worker_id, a.handler_version) for a in found] == [
        (1, "w1", "v1"),
        (2, "w2", "v2"),
        (3, "w3", None),
    ]
    text = render_attempts(found)
    assert "HANDLER_VERSION" in text.splitlines()[0] and "v2" in text
    page = view(lines, frozenset({"RunCompleted"}))  # the claims filtered out: still named
    assert [(s.attempt, s.version) for s in page.sections] == [(2, "v2")]
    assert [s.version for s in view(lines).sections] == [None, "v1", "v2", None]


def test_a_claim_stored_before_the_field_decodes_without_a_version() -> None:
    old = decode_event(
        '{"type":"RunClaimed","at":"2026-01-01T00:00:00Z","worker_id":"w1","attempt":1,'
        '"lease_until":"2026-01-01T00:00:30Z"}'
    )
    new = decode_event(
        '{"type":"RunClaimed","at":"2026-01-01T00:00:00Z","worker_id":"w1","attempt":2,'
        '"lease_until":"2026-01-01T00:00:30Z","handler_version":"v2"}'
    )
    assert isinstance(old, RunClaimed) and old.handler_version is None
    assert isinstance(new, RunClaimed) and new.handler_version == "v2"
    assert NEWER_FIELDS["RunClaimed"] == {"handler_version"}  # kept out of the projector's rows
