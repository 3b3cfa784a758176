"""blocked_on on real Postgres and Redis: a run put into each state (a shard no worker reads, a
dead-lettered message, a retry, a lease, a tool, an approval, failures), and the same reason
from ``awooop runs list``, ``awooop runs show``, the console's pages and the
``awooop_runs_blocked`` gauge."""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any

import msgspec
import pytest
from prometheus_client import REGISTRY

from awooop.cli import build_parser
from awooop.commands.doctor_flow import blocked as blocked_check
from awooop.core.config import Settings
from awooop.core.context import PLATFORM_PROJECT
from awooop.core.errors import DeliveryLimitError
from awooop.core.events import ToolWaitStarted
from awooop.core.loops import LoopContext
from awooop.eventlog import deadletters
from awooop.ingest import credentials
from awooop.loops.stats import StatsLoops
from awooop.runs import approvals, control, leases
from awooop.services import Services
from awooop.streams.keys import WORKER_GROUP
from tests.integration.test_console import log_in
from tests.support.http import app_client
from tests.support.runs import create_runs

CTX = LoopContext(project_id="__platform__")


CONSOLE_REASON = re.compile(
    r'<div id="blocked-on"[^>]*>\s*<strong>blocked_on:</strong>\s*'
    r'<span class="reason">([a-z_]+)</span>'
)
UUIDS = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def projects_on_two_shards(services: Services) -> tuple[str, str]:
    """A project on a shard that a consumer reads and one on a shard nobody reads."""
    tag = uuid.uuid4().hex[:6]
    read = f"blocked-read-{tag}"
    for i in range(100):
        unread = f"blocked-unread-{tag}-{i}"
        if services.keys.shard_of(unread) != services.keys.shard_of(read):
            return read, unread
    raise AssertionError("no two shards")


async def a_reader(services: Services, project: str) -> None:
    """A consumer of the workers group reads the project's shard (what a worker does; Redis
    registers a consumer when a read delivers something, so a message is there to read)."""
    stream = services.keys.work_stream(services.keys.shard_of(project))
    await services.redis.xgroup_create(stream, WORKER_GROUP, id="0", mkstream=True)
    await services.redis.xadd(stream, {"m": "another run's message"})
    await services.redis.xreadgroup(WORKER_GROUP, "busy-worker", {stream: ">"}, count=1)


async def claimed(services: Services, project: str, ttl_s: float = 30.0) -> uuid.UUID:
    [run_id] = await create_runs(services.db, project)
    taken = await services.db.in_tenant(
        project, lambda c: leases.claim(c, run_id, "host:1:w1", ttl_s)
    )
    assert taken is not None
    return run_id


async def dead_letter_message(services: Services, project: str, run_id: uuid.UUID) -> None:
    """An open dead letter of a PENDING run, recorded by hand (the runtime fails the runs it
    dead-letters, and a retry resolves the dead letter: this is the odd case blocked_on
    still names)."""
    dead = deadletters.DeadLetterRecord(
        project_id=project,
        run_id=run_id,
        run_version=1,
        source=deadletters.WORK,
        group_name=WORKER_GROUP,
        delivery_count=11,
        reason="work message delivered 11 times (limit 10)",
    )
    await services.db.in_tenant(project, lambda c: deadletters.record(c, dead))


async def cli_json(settings: Settings, capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    args = build_parser().parse_args([*argv, "--json"])
    assert await args.run(settings, args) == 0
    return msgspec.json.decode(capsys.readouterr().out)


async def test_every_state_gives_one_reason_in_the_cli_the_console_and_the_gauge(
    services: Services, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    read, unread = projects_on_two_shards(services)
    await a_reader(services, read)
    expected: dict[uuid.UUID, tuple[str, str]] = {}

    [busy] = await create_runs(services.db, read)
    expected[busy] = (read, "pending_workers_busy")
    [nobody] = await create_runs(services.db, unread)
    expected[nobody] = (unread, "pending_no_worker")

    [stranded] = await create_runs(services.db, read)
    await dead_letter_message(services, read, stranded)
    expected[stranded] = (read, "pending_dead_lettered")

    retried = await claimed(services, read, ttl_s=0.01)
    await asyncio.sleep(0.05)
    reaped = await services.db.in_platform_writes(lambda c: leases.reap(c, 100))
    assert [s.run_id for s, _ in reaped] == [retried]
    expected[retried] = (read, "retry_pending")

    running = await claimed(services, read)
    expected[running] = (read, "running")
    expired = await claimed(services, read, ttl_s=0.01)
    await asyncio.sleep(0.05)
    expected[expired] = (read, "lease_expired")

    tool = await claimed(services, read)
    await services.db.in_tenant(
        read,
        lambda c: leases.fenced_record(
            c,
            tool,
            "host:1:w1",
            1,
            lambda _s, now: ToolWaitStarted(
                at=now, worker_id="host:1:w1", attempt=1, tool="search"
            ),
        ),
    )
    expected[tool] = (read, "waiting_tool")

    asked = await claimed(services, read)
    await services.db.in_tenant(
        read,
        lambda c: approvals.request(
            c, asked, "host:1:w1", 1, name="deploy", reason="prod rollout", ttl_s=600
        ),
    )
    expected[asked] = (read, "waiting_approval")

    dead = await claimed(services, read, ttl_s=0.01)
    await asyncio.sleep(0.05)
    failed = await services.db.in_tenant(
        read,
        lambda c: leases.fail_undeliverable(
            c, dead, "host:1:w2", "delivered too often", DeliveryLimitError.code
        ),
    )
    assert failed is not None
    expected[dead] = (read, "failed_dead_lettered")

    # The CLI: list and show agree with each other and with the expected reason.
    listed = await cli_json(settings, capsys, "runs", "list", "--limit", "100")
    by_run = {uuid.UUID(r["run_id"]): r["blocked_on"] for r in listed}
    assert {run_id: by_run[run_id]["reason"] for run_id in expected} == {
        run_id: reason for run_id, (_p, reason) in expected.items()
    }
    for run_id, (project, reason) in expected.items():
        shown = await cli_json(settings, capsys, "runs", "show", project, str(run_id))
        assert shown["blocked_on"]["reason"] == reason
        assert shown["blocked_on"]["next_action"] == by_run[run_id]["next_action"]
    assert "deploy (prod rollout)" in by_run[asked]["summary"]
    assert "host:1:w1" in by_run[running]["summary"]
    assert "tool search" in by_run[tool]["summary"]
    assert "attempt 2 of 3" in by_run[retried]["summary"]
    assert "E-RUN-005" in by_run[dead]["summary"] and by_run[dead]["retry_allowed"] is True
    assert f"shard {services.keys.shard_of(unread)}" in by_run[nobody]["summary"]

    # The console: each run's page names the same reason (an admin token sees every project).
    _, admin = await credentials.create_management_token(services.db, PLATFORM_PROJECT, "admin")
    async with app_client(settings, services.db) as http:
        await log_in(http, admin)
        for run_id, (project, reason) in expected.items():
            page = (await http.get(f"/ui/runs/{project}/{run_id}")).text
            found = CONSOLE_REASON.search(page)
            assert found is not None and found.group(1) == reason, (run_id, reason)
        for reason in {r for _p, r in expected.values()}:
            listed = (await http.get("/ui/runs", params={"blocked_on": reason})).text
            assert {str(r) for r, (_p, why) in expected.items() if why == reason} <= {
                r for r in UUIDS.findall(listed)
            }, reason

    # The gauge: the same reasons, counted per project.
    await StatsLoops(services).sample_runs(CTX)
    counts: dict[tuple[str, str], int] = {}
    for project, reason in expected.values():
        counts[(project, reason)] = counts.get((project, reason), 0) + 1
    for (project, reason), n in counts.items():
        got = REGISTRY.get_sample_value(
            "awooop_runs_blocked", {"project_id": project, "reason": reason}
        )
        assert got == n, (project, reason)
    assert (
        REGISTRY.get_sample_value("awooop_runs_blocked", {"project_id": read, "reason": "failed"})
        == 0
    )

    # Doctor: a run waits on a shard nobody reads.
    [line] = await blocked_check(services)
    assert line.status == "FAIL" and unread in line.detail and "1 pending_no_worker" in line.detail


async def test_a_finished_run_is_blocked_on_nothing(
    services: Services, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    project = f"blocked-done-{uuid.uuid4().hex[:6]}"
    [run_id] = await create_runs(services.db, project)
    await services.db.in_tenant(project, lambda c: leases.claim(c, run_id, "w", 30.0, None))

    await services.db.in_tenant(
        project, lambda c: control.cancel(c, run_id, actor="t", reason="done")
    )
    shown = await cli_json(settings, capsys, "runs", "show", project, str(run_id))
    assert shown["blocked_on"] is None
