"""The demo scenario: every component as a real process, driven like production would be.

Phases: webhooks from all five channels with duplicate deliveries; a worker killed with
SIGKILL mid-run and the run recovered by another worker without repeating its journaled
steps; a revision activated while workers call the model; one approval granted and one left
to expire; then a replay verify of run_state and `awooop doctor`. It prints live progress and
ends with a summary.
Short lease and approval figures keep it to a couple of minutes; they are printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from awooop.core.embedded import free_port
from awooop.demo import webhooks
from awooop.demo.processes import Processes
from awooop.demo.provision import RUNTIME_ROLE, Provisioned, recreate_database, runtime_login

PROJECT = "demo"
HANDLER = "awooop.examples.handlers:handle"
WORKERS = 3
DEMO_ENV = {
    "AWOOOP_LEASE_TTL_S": "6",
    "AWOOOP_HEARTBEAT_INTERVAL_S": "1",
    "AWOOOP_REAPER_INTERVAL_S": "2",
    "AWOOOP_RECLAIM_INTERVAL_S": "2",
    "AWOOOP_APPROVAL_TTL_S": "10",
    "AWOOOP_APPROVAL_RESOLVER_INTERVAL_S": "1",
    "AWOOOP_RELAY_POLL_INTERVAL_S": "0.5",
    "AWOOOP_LLM_URL": "local:?delay_ms=20",
    "AWOOOP_LOG_LEVEL": "warning",
    "AWOOOP_SHUTDOWN_GRACE_S": "5",
}

# --- SQL (observation only; the demo changes nothing behind the runtime's back) -------------
COUNT_BY_STATE = "SELECT status, count(*) FROM awooop_run_state GROUP BY status"
RUN_ROW = """
SELECT status, worker_id, attempt_count, failure_code FROM awooop_run_state WHERE run_id = $1
"""
CLAIMS = """
SELECT recorded_at, data->>'worker_id' AS worker_id, (data->>'attempt')::int AS attempt
FROM awooop_events WHERE stream_id = $1 AND event_type = 'RunClaimed' ORDER BY version
"""
STEP_COUNTS = """
SELECT data->>'step' AS step, count(*) FROM awooop_events
WHERE stream_id = $1 AND event_type = 'StepCompleted' GROUP BY 1
"""
SUMMARISE_STEPS = """
SELECT recorded_at, data->'result'->>'revision_id' AS revision_id FROM awooop_events
WHERE event_type = 'StepCompleted' AND data->>'step' = 'summarise' AND recorded_at >= $1
ORDER BY recorded_at
"""
COMPLETIONS_PER_RUN = """
SELECT max(n) FROM (SELECT count(*) AS n FROM awooop_events
                    WHERE event_type = 'RunCompleted' GROUP BY stream_id) AS c
"""
TRACE_IDS = """
SELECT DISTINCT ON (r.channel_type) e.metadata->>'traceparent' AS traceparent, r.channel_type
FROM awooop_events e JOIN awooop_run_state r ON e.stream_id = 'run-' || r.run_id
WHERE e.event_type = 'RunCreated' AND e.metadata ? 'traceparent'
ORDER BY r.channel_type, e.position
"""


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


@dataclass
class Summary:
    accepted: int = 0
    duplicates: int = 0
    runs: set[str] = field(default_factory=set)
    recovery_s: float | None = None
    journal_ok: bool | None = None
    notice_ms: float | None = None
    switch_s: float | None = None
    stale_calls: int | None = None
    approved: str | None = None
    expired: str | None = None
    verify_exit: int | None = None
    doctor_exit: int | None = None
    states: dict[str, int] = field(default_factory=dict)
    max_completions: int | None = None
    traces: list[tuple[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


class Demo:
    def __init__(self, where: Provisioned, project_dir: Path, workers: int = WORKERS) -> None:
        self.where = where
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        state_dir = project_dir / ".awooop" / "demo"
        state_dir.mkdir(parents=True, exist_ok=True)
        self.approvals_file = state_dir / "approvals.jsonl"
        self.approvals_file.write_bytes(b"")
        self.workers = workers
        self.env = {
            **DEMO_ENV,
            "AWOOOP_DATABASE_URL": where.database_url,
            "AWOOOP_REDIS_URL": where.redis_url,
            "AWOOOP_REDIS_KEY_PREFIX": where.redis_prefix,
            "AWOOOP_HTTP_PORT": str(self.port),
            "AWOOOP_EXAMPLE_APPROVALS": str(self.approvals_file),
            "OTEL_SERVICE_NAME": "awooop-demo",
        }
        self.procs = Processes(self.env, state_dir / "logs")
        self.summary = Summary()
        self.tokens: dict[str, str] = {}
        self.http = httpx.AsyncClient(base_url=self.base, timeout=10)
        self.pg: asyncpg.Pool[Any] | None = None
        self.worker_count = 0

    # --- plumbing --------------------------------------------------------------------------

    async def cli(self, *args: str) -> str:
        code, out, err = await self.procs.run(*args)
        if code != 0:
            raise RuntimeError(f"awooop {' '.join(args[:3])} failed: {err.strip()[-300:]}")
        return out

    def management_auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens['manage']}"}

    async def fetch(self, query: str, *args: Any) -> list[Any]:
        assert self.pg is not None
        return list(await self.pg.fetch(query, *args))

    async def start_worker(self) -> None:
        self.worker_count += 1
        await self.procs.start(f"worker-{self.worker_count}", "worker", "--handler", HANDLER)

    async def deliver(self, d: webhooks.Delivery) -> list[str]:
        response = await self.http.post(
            f"/v1/projects/{PROJECT}/channels/{d.channel}", content=d.body, headers=d.headers
        )
        body = response.json()
        if response.status_code == 202:
            self.summary.accepted += 1
        elif response.status_code == 200 and body.get("code") == "E-IDEMPOTENT-001":
            self.summary.duplicates += 1
        else:
            self.summary.problems.append(f"{d.channel}: HTTP {response.status_code} {body}")
            return []
        run_ids = [str(r) for r in body.get("run_ids", [])] or (
            [str(body["run_id"])] if body.get("run_id") else []
        )
        self.summary.runs.update(run_ids)
        return run_ids

    async def wait_for(self, what: str, check: Any, limit_s: float = 60) -> Any:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            result = await check()
            if result:
                return result
            await asyncio.sleep(0.1)
        raise RuntimeError(f"timed out waiting for {what}")

    async def progress(self) -> None:
        while True:
            counts = dict(await self.fetch(COUNT_BY_STATE))
            line = "  ".join(f"{k}={v}" for k, v in sorted(counts.items()))
            say(
                f"runs: {line or 'none yet'}  | accepted={self.summary.accepted} "
                f"duplicates={self.summary.duplicates}"
            )
            await asyncio.sleep(2)

    # --- phases ----------------------------------------------------------------------------

    async def setup(self) -> None:
        say(
            f"services: {self.where.how}; database {self.where.database_url.rsplit('@', 1)[-1]}, "
            f"redis {self.where.redis_url} prefix {self.where.redis_prefix}"
        )
        say("migrating")
        await self.cli("migrate")
        self.procs.env["AWOOOP_DATABASE_URL"] = await runtime_login(self.where.database_url)
        say(
            f"every process logs in as {RUNTIME_ROLE}: a member of awooop_app and awooop_platform, "
            "no superuser (migrations and replay run as the owner)"
        )
        for channel, secret in webhooks.SECRETS.items():
            await self.cli("channels", "set-secret", PROJECT, channel, secret)
        for channel in ("api", "alertmanager"):
            out = await self.cli("tokens", "create", PROJECT, "--channel", channel)
            self.tokens[channel] = out.strip().splitlines()[0]
        # The management routes (activation, approval) take a management token of the project.
        out = await self.cli("tokens", "create", PROJECT, "--scope", "manage")
        self.tokens["manage"] = out.strip().splitlines()[0]
        agent = await self.cli(
            "revisions",
            "create",
            PROJECT,
            "agent",
            "default",
            "--body",
            json.dumps({"max_attempts": 3}),
        )
        await self.cli(
            "revisions", "activate", PROJECT, "agent", "default", agent.strip().splitlines()[-1]
        )
        self.v1 = await self.create_policy({"model": "local-small", "temperature": 0.1})
        await self.cli("revisions", "activate", PROJECT, "policy_routing", "default", self.v1)
        say("channel secrets, tokens, agent contract and policy v1 in place; starting processes")
        await self.procs.start("serve", "serve")
        await self.procs.start("relay", "relay")
        await self.procs.start("loops", "loops", "run")
        await self.procs.start("projector", "projector")
        for _ in range(self.workers):
            await self.start_worker()

        async def ready() -> bool:
            with contextlib.suppress(httpx.HTTPError):
                return (await self.http.get("/readyz")).status_code == 200
            return False

        await self.wait_for("the HTTP server", ready, limit_s=60)
        say(
            f"up: serve :{self.port}, relay, loops, projector, {self.workers} workers "
            f"(lease {DEMO_ENV['AWOOOP_LEASE_TTL_S']} s, approval TTL "
            f"{DEMO_ENV['AWOOOP_APPROVAL_TTL_S']} s for the demo)"
        )

    async def create_policy(self, body: dict[str, Any]) -> str:
        out = await self.cli(
            "revisions", "create", PROJECT, "policy_routing", "default", "--body", json.dumps(body)
        )
        return out.strip().splitlines()[-1]

    async def webhooks_phase(self) -> None:
        say("phase 1: webhooks from all five channels, each delivered 1-3 times at once")
        deliveries = []
        for n in range(4):
            deliveries += [
                webhooks.telegram(900000 + n, f"/status api-{n}"),
                webhooks.alertmanager(self.tokens["alertmanager"], n),
                webhooks.gitea(n),
                webhooks.line(n),
                webhooks.api(self.tokens["api"], {"text": f"deploy check {n}"}),
            ]
        sends = [self.deliver(d) for i, d in enumerate(deliveries) for _ in range(1 + i % 3)]
        await asyncio.gather(*sends)
        await self.wait_for("phase 1 runs to finish", self.all_terminal, limit_s=90)
        say(
            f"phase 1 done: {self.summary.accepted} accepted, "
            f"{self.summary.duplicates} duplicates refused with E-IDEMPOTENT-001"
        )

    async def all_terminal(self) -> bool:
        counts = dict(await self.fetch(COUNT_BY_STATE))
        live = sum(v for k, v in counts.items() if k not in ("COMPLETED", "FAILED", "CANCELLED"))
        return live == 0 and bool(counts)

    async def crash_phase(self) -> None:
        say("phase 2: a worker is killed with SIGKILL in the middle of a run")
        [run_id] = await self.deliver(
            webhooks.api(self.tokens["api"], {"text": "slow rollout check", "work_s": 4})
        )

        async def running() -> Any:
            rows = await self.fetch(RUN_ROW, uuid.UUID(run_id))
            return rows[0] if rows and rows[0]["status"] == "RUNNING" else None

        row = await self.wait_for("the slow run to start", running)
        pid = int(row["worker_id"].rsplit("-", 2)[-2])
        victim = self.procs.by_pid(pid)
        if victim is None:
            self.summary.problems.append(f"no demo worker has pid {pid}")
            return
        await asyncio.sleep(1.0)  # let it journal its first steps
        self.procs.kill(victim)
        killed_at = time.time()
        say(f"killed {victim.name} (pid {pid}) holding run {run_id}; starting a replacement")
        await self.start_worker()

        async def reclaimed() -> Any:
            claims = await self.fetch(CLAIMS, f"run-{run_id}")
            return claims[-1] if len(claims) > 1 else None

        claim = await self.wait_for("another worker to take the run", reclaimed, limit_s=90)
        self.summary.recovery_s = claim["recorded_at"].timestamp() - killed_at

        async def finished() -> Any:
            rows = await self.fetch(RUN_ROW, uuid.UUID(run_id))
            return rows[0]["status"] if rows[0]["status"] in ("COMPLETED", "FAILED") else None

        status = await self.wait_for("the recovered run to finish", finished, limit_s=60)
        steps = dict(await self.fetch(STEP_COUNTS, f"run-{run_id}"))
        self.summary.journal_ok = status == "COMPLETED" and all(v == 1 for v in steps.values())
        say(
            f"run {run_id} taken by {claim['worker_id']} (attempt {claim['attempt']}) "
            f"{self.summary.recovery_s:.1f} s after the kill; {status}; steps journaled once: "
            f"{self.summary.journal_ok} {steps}"
        )

    async def revision_phase(self) -> None:
        say("phase 3: policy v2 activated while workers call the model")
        v2 = await self.create_policy({"model": "local-large", "temperature": 0.0})
        traffic = asyncio.gather(
            *(
                self.deliver_later(i * 0.1, webhooks.api(self.tokens["api"], {"text": f"q{i}"}))
                for i in range(40)
            )
        )
        await asyncio.sleep(1.5)
        response = await self.http.post(
            f"/v1/projects/{PROJECT}/contracts/policy_routing/default/activate",
            json={"revision_id": v2, "expected_revision_id": self.v1},
            headers=self.management_auth(),
        )
        activated_at = time.time()
        if response.status_code != 200:
            self.summary.problems.append(f"activation: HTTP {response.status_code} {response.text}")
            return
        await traffic
        await self.wait_for("phase 3 runs to finish", self.all_terminal, limit_s=90)
        since = await self.fetch("SELECT to_timestamp($1::float8)", activated_at - 5)
        steps = await self.fetch(SUMMARISE_STEPS, since[0][0])
        first_new = next(
            (s["recorded_at"].timestamp() for s in steps if s["revision_id"] == v2), None
        )
        # A step completed more than one model call (20 ms) after the activation returned
        # started after it committed: it must have used v2.
        self.summary.stale_calls = sum(
            1
            for s in steps
            if s["recorded_at"].timestamp() > activated_at + 0.5 and s["revision_id"] != v2
        )
        if first_new is not None:
            self.summary.switch_s = max(0.0, first_new - activated_at)
        say(
            f"v2 {v2} active; first model call on v2 {self.summary.switch_s or 0:.3f} s after "
            f"the activation; calls on the old policy after it: {self.summary.stale_calls}"
        )

    async def deliver_later(self, delay: float, d: webhooks.Delivery) -> None:
        await asyncio.sleep(delay)
        await self.deliver(d)

    async def approval_phase(self) -> None:
        say("phase 4: two runs ask for approval; one is approved, one is left to expire")
        [approve_run] = await self.deliver(
            webhooks.api(self.tokens["api"], {"text": "restart api-1", "approval": True})
        )
        [expire_run] = await self.deliver(
            webhooks.api(self.tokens["api"], {"text": "drop the cache", "approval": True})
        )

        async def tokens() -> dict[str, str] | None:
            found = {}
            for line in self.approvals_file.read_text().splitlines():
                ticket = json.loads(line)
                found[str(ticket["run_id"])] = ticket["token"]
            return found if approve_run in found and expire_run in found else None

        found = await self.wait_for("approval requests", tokens, limit_s=60)
        response = await self.http.post(
            f"/v1/projects/{PROJECT}/runs/{approve_run}/approve",
            json={"token": found[approve_run], "actor": "demo"},
            headers=self.management_auth(),
        )
        if response.status_code != 200:
            self.summary.problems.append(f"approve: HTTP {response.status_code} {response.text}")

        async def settled() -> tuple[str, str] | None:
            a = (await self.fetch(RUN_ROW, uuid.UUID(approve_run)))[0]
            b = (await self.fetch(RUN_ROW, uuid.UUID(expire_run)))[0]
            done = ("COMPLETED", "FAILED")
            if a["status"] in done and b["status"] in done:
                return (a["status"], f"{b['status']} {b['failure_code']}")
            return None

        self.summary.approved, self.summary.expired = await self.wait_for(
            "the approved run to finish and the other to expire", settled, limit_s=90
        )
        say(
            f"approved run {approve_run}: {self.summary.approved}; "
            f"unapproved run {expire_run}: {self.summary.expired}"
        )

    async def verify_phase(self) -> None:
        say("phase 5: rebuilding run_state from the event log and comparing (replay --verify)")
        owner = {"AWOOOP_DATABASE_URL": self.where.database_url}  # replay builds shadow tables
        code, out, _ = await self.procs.run("replay", "run_state", "--verify", env=owner)
        self.summary.verify_exit = code
        for line in out.strip().splitlines()[-3:]:
            say(f"  replay: {line}")
        say("phase 6: awooop doctor")
        code, out, _ = await self.procs.run("doctor")
        self.summary.doctor_exit = code
        lines = out.splitlines()
        noted = [line for line in lines if not line.startswith("OK") or "login role" in line]
        say(f"  doctor: {len(lines)} checks, exit {code}")
        for line in noted:  # WARN and FAIL lines, and who the processes log in as
            say(f"  doctor: {' '.join(line.split())}")

    async def collect(self) -> None:
        self.summary.states = dict(await self.fetch(COUNT_BY_STATE))
        self.summary.max_completions = (await self.fetch(COMPLETIONS_PER_RUN))[0][0]
        for row in await self.fetch(TRACE_IDS):
            self.summary.traces.append((row["channel_type"], row["traceparent"].split("-")[1]))

    def report(self) -> bool:
        s = self.summary
        checks = {
            "every run terminal": set(s.states) <= {"COMPLETED", "FAILED", "CANCELLED"},
            "no run completed twice": (s.max_completions or 0) <= 1,
            "crashed run recovered, journaled steps not repeated": bool(s.journal_ok),
            "no model call on the old policy after the switch": s.stale_calls == 0,
            "approved run completed": s.approved == "COMPLETED",
            "unapproved run expired with E-APPROVAL-002": s.expired == "FAILED E-APPROVAL-002",
            "replay verify found no difference": s.verify_exit == 0,
            "awooop doctor found nothing failing": s.doctor_exit == 0,
            "no unexpected HTTP answer": not s.problems,
        }
        print("\n=== AwoooP demo summary ===")
        print("runs by state:      " + ", ".join(f"{k} {v}" for k, v in sorted(s.states.items())))
        print(
            f"deliveries:         {s.accepted} accepted, {s.duplicates} duplicates refused "
            "(E-IDEMPOTENT-001)"
        )
        print(
            f"crash recovery:     {s.recovery_s:.1f} s from SIGKILL to the new lease"
            if s.recovery_s is not None
            else "crash recovery:     -"
        )
        print(
            f"revision switch:    first call on v2 {s.switch_s:.3f} s after activation"
            if s.switch_s is not None
            else "revision switch:    -"
        )
        print(f"replay verify:      exit {s.verify_exit}")
        print(f"doctor:             exit {s.doctor_exit}")
        for channel, trace_id in s.traces:
            print(f"trace ({channel:<12}) {trace_id}  (look it up in Tempo)")
        for name, ok in checks.items():
            print(f"  [{'ok' if ok else 'FAIL'}] {name}")
        for problem in s.problems:
            print(f"  problem: {problem}")
        return all(checks.values())

    async def run(self) -> bool:
        await asyncio.to_thread(self._recreate)
        await self.setup()
        self.pg = await asyncpg.create_pool(self.where.database_url, min_size=1, max_size=3)
        ticker = asyncio.create_task(self.progress())
        try:
            await self.webhooks_phase()
            await self.crash_phase()
            await self.revision_phase()
            await self.approval_phase()
            await self.wait_for("every run to finish", self.all_terminal, limit_s=60)
            await self.verify_phase()
            await self.collect()
        finally:
            ticker.cancel()
        return self.report()

    def _recreate(self) -> None:
        server = self.where.database_url.rsplit("/", 1)[0] + "/postgres"
        asyncio.run(recreate_database(server))

    async def close(self) -> None:
        codes = await self.procs.stop_all()
        if self.pg is not None:
            await self.pg.close()
        await self.http.aclose()
        unclean = {n: c for n, c in codes.items() if c not in (0, -signal.SIGKILL)}
        if unclean:
            say(f"processes that did not stop cleanly: {unclean} (logs in {self.procs.log_dir})")
