"""The demo's stage: its settings, the processes, and how the scenario talks to them.

The runtime's processes are started as in production (``awooop serve``, ``relay``, ``loops
run``, ``projector``, workers), driven over HTTP and the CLI, and observed with read-only
queries; :mod:`awooop.demo.scenario` plays the phases on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from awooop.core.errors import DuplicateEvent
from awooop.demo import webhooks
from awooop.demo.processes import Processes
from awooop.demo.provision import RUNTIME_ROLE, Provisioned, recreate_database, runtime_login
from awooop.demo.servers import free_port
from awooop.demo.summary import Summary

PROJECT = "demo"
HANDLER = "awooop.examples.handlers:handle"  # the workers of contract "default"
WORKERS = 3
# The triage agent and its lookups: one more worker, routed to those contracts only.
TRIAGE_HANDLER = "awooop.examples.triage:handle"
TRIAGE_CONTRACTS = ("triage", "lookup")
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


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


class Stage:
    """The running system as the demo sees it; :class:`awooop.demo.scenario.Demo` adds the
    phases."""

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

    async def cli(self, *args: str, env: dict[str, str] | None = None) -> str:
        code, out, err = await self.procs.run(*args, env=env)
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
        await self.procs.start(
            f"worker-{self.worker_count}", "worker", "--handler", HANDLER, "--contract", "default"
        )

    async def deliver(self, d: webhooks.Delivery) -> list[str]:
        response = await self.http.post(
            f"/v1/projects/{PROJECT}/channels/{d.channel}",
            content=d.body,
            headers=d.headers,
            params={"contract_id": d.contract} if d.contract else None,
        )
        body = response.json()
        if response.status_code == 202:
            self.summary.accepted += 1
        elif response.status_code == 200 and body.get("code") == DuplicateEvent.code:
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

    async def prepare(self) -> None:
        """Migrate, and put in place what the processes need: logins, secrets, tokens and the
        contracts' revisions."""
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
        say("channel secrets, tokens, agent contract and policy v1 in place")

    async def start_processes(self, projections: Sequence[str] = ()) -> None:
        """Start every process; the projector runs the services' ``projections`` (sources
        ``module:object``) beside the built-in ones."""
        await self.procs.start("serve", "serve")
        await self.procs.start("relay", "relay")
        await self.procs.start("loops", "loops", "run")
        registered = [arg for source in projections for arg in ("--projection", source)]
        await self.procs.start("projector", "projector", *registered)
        for _ in range(self.workers):
            await self.start_worker()
        routes = [arg for contract in TRIAGE_CONTRACTS for arg in ("--contract", contract)]
        await self.procs.start("worker-triage", "worker", "--handler", TRIAGE_HANDLER, *routes)

        async def ready() -> bool:
            with contextlib.suppress(httpx.HTTPError):
                return (await self.http.get("/readyz")).status_code == 200
            return False

        await self.wait_for("the HTTP server", ready, limit_s=60)
        also = "".join(f" + {source}" for source in projections)
        say(
            f"up: serve :{self.port}, relay, loops, projector{also}, {self.workers} workers of "
            f"contract default and one of {' and '.join(TRIAGE_CONTRACTS)} "
            f"(lease {DEMO_ENV['AWOOOP_LEASE_TTL_S']} s, "
            f"approval TTL {DEMO_ENV['AWOOOP_APPROVAL_TTL_S']} s for the demo)"
        )

    async def create_policy(self, body: dict[str, Any]) -> str:
        out = await self.cli(
            "revisions", "create", PROJECT, "policy_routing", "default", "--body", json.dumps(body)
        )
        return out.strip().splitlines()[-1]

    async def all_terminal(self) -> bool:
        counts = dict(await self.fetch(COUNT_BY_STATE))
        live = sum(v for k, v in counts.items() if k not in ("COMPLETED", "FAILED", "CANCELLED"))
        return live == 0 and bool(counts)

    async def deliver_later(self, delay: float, d: webhooks.Delivery) -> None:
        await asyncio.sleep(delay)
        await self.deliver(d)

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
