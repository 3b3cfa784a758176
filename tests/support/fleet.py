"""A fleet of ``awooop`` processes under HTTP ingest load, replaced process by process with
another build's: the machinery of the rolling-upgrade test (tests/acceptance/test_fleet_upgrade.py).

A build is a :class:`~awooop.demo.processes.Processes` of one installation (this checkout, or
an earlier release's tree and virtual environment: tests/support/releases.py). The load goes
through :class:`Rotation`, a client-side load balancer over the live ``awooop serve``
endpoints, as a real one would: a serve being replaced leaves the rotation before it is told
to stop, and stops gracefully (SIGTERM) with whatever it still serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from awooop.demo.processes import Child, Processes
from awooop.demo.servers import free_port
from tests.support.http import wait_ready
from tests.support.waiting import eventually

HANDLER = "awooop.examples.handlers:handle"  # the demo's: journaled steps, a model call, approvals
# What each role runs, and the log event that says it is up (serve: /readyz answers 200).
COMMANDS: dict[str, tuple[str, ...]] = {
    "serve": ("serve",),
    "relay": ("relay",),
    "loops": ("loops", "run"),
    "projector": ("projector",),
    "worker": ("worker", "--handler", HANDLER),
}
STARTED = {
    "relay": "relay_starting",
    "loops": "loops_running",
    "projector": "projector_running",
    "worker": "worker_started",
}
START_S = 90.0  # a process start on a loaded 2-core machine: imports, pools, first queries
STOP_S = 60.0  # a graceful stop: the shutdown grace plus the process's own cleanup


def command(role: str) -> str:
    """``worker-2`` runs ``worker``."""
    return role.split("-", 1)[0]


@dataclass
class Member:
    role: str
    build: str
    child: Child
    url: str | None = None  # a serve's base URL

    @property
    def name(self) -> str:
        return self.child.name

    def log(self) -> str:
        return self.child.log_path.read_text(errors="replace")

    def events(self) -> list[dict[str, Any]]:
        found = []
        for line in self.log().splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    found.append(json.loads(line))
        return found

    def worker_id(self) -> str | None:
        for line in self.log().splitlines():
            if line.startswith("worker ") and line.endswith(" started"):
                return line.split()[1]
        return None

    def exited(self) -> None:
        """Fail with its log when the process has ended."""
        code = self.child.process.returncode
        if code is not None:
            raise AssertionError(f"{self.name} exited with {code}:\n{self.log()[-4000:]}")


@dataclass
class Rotation:
    """The client side's load balancer: round robin over the serve endpoints in rotation."""

    endpoints: list[str] = field(default_factory=list)
    in_flight: Counter[str] = field(default_factory=Counter)
    answered: Counter[str] = field(default_factory=Counter)
    _turn: itertools.count[int] = field(default_factory=itertools.count)

    def pick(self) -> str:
        assert self.endpoints, "no serve in rotation"
        return self.endpoints[next(self._turn) % len(self.endpoints)]

    async def drained(self, url: str) -> None:
        """Until no request sent to ``url`` is still waiting for its answer."""
        await eventually(lambda: self.in_flight[url] == 0, what=f"requests to {url} answered")


@dataclass
class Load:
    """API-channel deliveries at ``rate`` per second through ``rotation``; every answer counted.

    A 202 is an accepted run (its idempotency key and run id kept); anything else, including
    a connection error or a timeout, is a failure. New connections for every request: a
    keep-alive connection that the server closes while idle can race the next request on it,
    a client artefact that would hide or fake what the server did."""

    rotation: Rotation
    project: str
    token: str
    rate: float
    accepted: dict[str, str] = field(default_factory=dict)  # idempotency key -> run id
    failures: list[str] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    seconds: float = 0.0  # how long it delivered, in all
    http: httpx.AsyncClient = field(
        default_factory=lambda: httpx.AsyncClient(
            timeout=30, limits=httpx.Limits(max_keepalive_connections=0)
        )
    )

    async def submit(self, body: dict[str, Any]) -> str | None:
        """One delivery; its run id when accepted."""
        key = str(uuid.uuid4())
        url = self.rotation.pick()
        self.rotation.in_flight[url] += 1
        try:
            answer = await self.http.post(
                f"{url}/v1/projects/{self.project}/channels/api",
                json=body,
                headers={"Authorization": f"Bearer {self.token}", "Idempotency-Key": key},
            )
        except httpx.HTTPError as exc:
            self.failures.append(f"{url}: {type(exc).__name__}: {exc}")
            return None
        finally:
            self.rotation.in_flight[url] -= 1
        self.rotation.answered[url] += 1
        self.statuses[answer.status_code] += 1
        if answer.status_code != 202:
            self.failures.append(f"{url}: HTTP {answer.status_code} {answer.text[:300]}")
            return None
        run_id = str(answer.json()["run_ids"][0])
        self.accepted[key] = run_id
        return run_id

    async def run(self, stop: asyncio.Event) -> None:
        """Deliver at the rate until ``stop``; then wait for every answer."""
        sending: set[asyncio.Task[str | None]] = set()
        began = start = time.monotonic()
        sent = 0
        while not stop.is_set():
            task = asyncio.create_task(self.submit({"text": f"load {len(self.accepted)}"}))
            sending.add(task)
            task.add_done_callback(sending.discard)
            sent += 1
            behind = time.monotonic() - (start + sent / self.rate)
            if behind > 1.0:  # the machine stalled: go on at the rate, not in a burst
                start, sent = time.monotonic(), 0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, -behind))
        await asyncio.gather(*sending)
        self.seconds += time.monotonic() - began

    async def close(self) -> None:
        await self.http.aclose()


@dataclass
class Fleet:
    """The live process of each role, and every process that has stopped with its exit code."""

    builds: dict[str, Processes]
    rotation: Rotation = field(default_factory=Rotation)
    members: dict[str, Member] = field(default_factory=dict)
    everyone: list[Member] = field(default_factory=list)
    exit_codes: dict[str, int] = field(default_factory=dict)
    _generation: itertools.count[int] = field(default_factory=itertools.count)

    async def start(self, role: str, build: str) -> Member:
        """Start ``role`` from ``build`` and wait until it is up (a serve: in rotation)."""
        args = COMMANDS[command(role)]
        url = None
        if command(role) == "serve":
            port = free_port()
            args = (*args, "--port", str(port))
            url = f"http://127.0.0.1:{port}"
        name = f"{role}.{next(self._generation)}.{build}"
        member = Member(role, build, await self.builds[build].start(name, *args), url)
        self.everyone.append(member)
        if url is not None:
            async with httpx.AsyncClient(base_url=url, timeout=5) as http:
                try:
                    await wait_ready(http)
                except AssertionError as exc:
                    raise AssertionError(f"{name}: {exc}\n{member.log()[-4000:]}") from None
            self.rotation.endpoints.append(url)
        else:
            marker = f'"event": "{STARTED[command(role)]}"'

            def up() -> bool:
                member.exited()
                return marker in member.log()

            await eventually(up, what=f"{name} started", timeout_s=START_S, interval_s=0.1)
        return member

    async def up(self, roles: tuple[str, ...], build: str) -> None:
        """Start every role from ``build`` at once."""
        started = await asyncio.gather(*(self.start(role, build) for role in roles))
        self.members.update({m.role: m for m in started})

    async def roll(
        self, role: str, build: str, overlap: Callable[[Member], Awaitable[bool]]
    ) -> Member:
        """Replace ``role``'s process with one of ``build``: start the new one, wait until
        ``overlap(new)`` (it took part in the work beside the old one), then stop the old one
        gracefully; fail unless the old one exits 0."""
        old = self.members[role]
        new = await self.start(role, build)

        async def overlapping() -> bool:
            new.exited()
            return await overlap(new)

        await eventually(overlapping, what=f"{new.name} working beside {old.name}", timeout_s=60)
        self.members[role] = new
        code = await self.stop(old)
        assert code == 0, f"{old.name} exited with {code} on SIGTERM:\n{old.log()[-4000:]}"
        return new

    async def stop(self, member: Member) -> int:
        """Take ``member`` out of rotation, let its requests finish, SIGTERM it, wait."""
        if member.url is not None and member.url in self.rotation.endpoints:
            self.rotation.endpoints.remove(member.url)
            await self.rotation.drained(member.url)
        code = await self.builds[member.build].stop(member.child, STOP_S)
        self.exit_codes[member.name] = code
        return code

    async def stop_all(self) -> None:
        """Stop every process still running, also one that a failed roll left behind."""
        running = [m for m in self.everyone if m.child.process.returncode is None]
        await asyncio.gather(*(self.stop(m) for m in running))
        self.members.clear()

    def worker_logs(self) -> list[dict[str, Any]]:
        """Every log event of every worker process the fleet ran."""
        return [e for m in self.everyone if command(m.role) == "worker" for e in m.events()]

    def errors(self) -> list[str]:
        """Log lines at level error or above, from every process: its name, the event, the
        loop and the exception's last line."""
        return [
            f"{m.name}: {e.get('event')} {e.get('loop') or ''} "
            f"{(e.get('exception') or e.get('error') or '').strip().splitlines()[-1:]}"
            for m in self.everyone
            for e in m.events()
            if e.get("level") in ("error", "critical")
        ]


def tickets(path: Path) -> dict[str, str]:
    """Run id -> approval token of each approval the example handler asked for."""
    if not path.exists():
        return {}
    found = {}
    for line in path.read_text().splitlines():
        ticket = json.loads(line)
        found[str(ticket["run_id"])] = str(ticket["token"])
    return found
