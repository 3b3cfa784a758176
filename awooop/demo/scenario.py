"""The demo scenario: every component as a real process, driven like production would be.

Phases: webhooks from all five channels with duplicate deliveries; a worker killed with
SIGKILL mid-run and the run recovered by another worker without repeating its journaled
steps; a revision activated while workers call the model; one approval granted and one left
to expire; beside them, the example triage agent's two tickets (awooop/demo/triage_phase.py:
an approval, a reply signal and a reply's timeout, child runs, a durable sleep, streamed
output) and the example orders service (awooop/demo/orders_phase.py: orders placed from
psycopg in the service's transactions, its projection checked by replay); then a replay
verify of run_state and `awooop doctor`. It prints live progress and ends with a summary.
Short lease and approval figures keep it to a couple of minutes; they are printed.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import asyncpg

from awooop.core.events import run_stream_id, run_stream_sql
from awooop.demo import webhooks
from awooop.demo.orders_phase import SOURCE as ORDERS_PROJECTION
from awooop.demo.orders_phase import OrdersPhase
from awooop.demo.stage import COUNT_BY_STATE, PROJECT, say
from awooop.demo.summary import report
from awooop.demo.triage_phase import TriagePhase

# --- SQL (observation only; the demo changes nothing behind the runtime's back) -------------
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
TRACE_IDS = f"""
SELECT DISTINCT ON (r.channel_type) e.metadata->>'traceparent' AS traceparent, r.channel_type
FROM awooop_events e JOIN awooop_run_state r ON e.stream_id = {run_stream_sql("r.run_id")}
WHERE e.event_type = 'RunCreated' AND e.metadata ? 'traceparent'
ORDER BY r.channel_type, e.position
"""  # noqa: S608 - constant identifiers


class Demo(OrdersPhase, TriagePhase):
    """The phases, in order (see the module docstring)."""

    # --- phases ----------------------------------------------------------------------------

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

    async def crash_phase(self) -> None:
        say("phase 2: a worker is killed with SIGKILL in the middle of a run")
        [delivered] = await self.deliver(
            webhooks.api(self.tokens["api"], {"text": "slow rollout check", "work_s": 4})
        )
        run_id = uuid.UUID(delivered)

        async def running() -> Any:
            rows = await self.fetch(RUN_ROW, run_id)
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
            claims = await self.fetch(CLAIMS, run_stream_id(run_id))
            return claims[-1] if len(claims) > 1 else None

        claim = await self.wait_for("another worker to take the run", reclaimed, limit_s=90)
        self.summary.recovery_s = claim["recorded_at"].timestamp() - killed_at

        async def finished() -> Any:
            rows = await self.fetch(RUN_ROW, run_id)
            return rows[0]["status"] if rows[0]["status"] in ("COMPLETED", "FAILED") else None

        status = await self.wait_for("the recovered run to finish", finished, limit_s=60)
        steps = dict(await self.fetch(STEP_COUNTS, run_stream_id(run_id)))
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
        say("phase 7: rebuilding run_state from the event log and comparing (replay --verify)")
        owner = {"AWOOOP_DATABASE_URL": self.where.database_url}  # replay builds shadow tables
        code, out, _ = await self.procs.run("replay", "run_state", "--verify", env=owner)
        self.summary.verify_exit = code
        for line in out.strip().splitlines()[-3:]:
            say(f"  replay: {line}")
        say("phase 8: awooop doctor")
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

    async def run(self) -> bool:
        await asyncio.to_thread(self._recreate)
        await self.prepare()
        await self.prepare_orders()
        await self.start_processes(projections=[ORDERS_PROJECTION])
        self.pg = await asyncpg.create_pool(self.where.database_url, min_size=1, max_size=3)
        ticker = asyncio.create_task(self.progress())
        try:
            await self.webhooks_phase()
            await self.crash_phase()
            await self.revision_phase()
            await asyncio.gather(self.approval_phase(), self.triage_phase(), self.orders_phase())
            await self.wait_for("every run to finish", self.all_terminal, limit_s=60)
            await self.verify_phase()
            await self.collect()
        finally:
            ticker.cancel()
        return report(self.summary)
