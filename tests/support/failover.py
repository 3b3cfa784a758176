"""A Postgres primary with a synchronous standby under pg_auto_failover (Debian packages
``pg-auto-failover-cli`` and ``postgresql-15-auto-failover``, which ``make test`` installs): a
monitor and two nodes on free loopback ports, each run by ``pg_autoctl`` as the ``postgres``
user in a temporary folder, reached through one multi-host URL
(``target_session_attrs=read-write``: whichever node is the primary).

pg_auto_failover keeps ``synchronous_standby_names = 'ANY 1 (...)'`` on the primary while its
standby is healthy, so a commit is acknowledged only once the standby has it; when the monitor
finds the primary unhealthy it promotes the standby (the tests kill the old primary with its
keeper, so it stays down and the new primary runs alone, in ``wait_primary``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import asyncpg

from awooop.demo.servers import free_port, postgres_bindir

MONITOR_DB = "pg_auto_failover"
NODES = ("node1", "node2")
DEMOTE_TIMEOUT = "5s"


def descendants(root: int) -> list[int]:
    """The pids of every process below ``root``, parents before their children (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # it ended meanwhile
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found: list[int] = []
    queue = [root]
    while queue:
        for child in children.get(queue.pop(0), []):
            found.append(child)
            queue.append(child)
    return found


def missing() -> str | None:
    """Why a formation cannot be started here, or None."""
    if shutil.which("pg_autoctl") is None:
        return (
            "pg_autoctl is not installed: run ops/install-test-deps.sh as root "
            "(make test runs it first)"
        )
    return None


class Formation:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="awooop-paf-"))
        self.monitor_port = free_port()
        self.ports = {name: free_port() for name in NODES}
        self.processes: list[subprocess.Popen[bytes]] = []
        self.keepers: dict[str, subprocess.Popen[bytes]] = {}  # by node name
        self.env = {**os.environ, "PATH": f"{postgres_bindir()}:{os.environ['PATH']}"}

    # --- the URLs ---------------------------------------------------------------------------

    def url(self, database: str = "postgres") -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.ports.values())
        return f"postgresql://postgres@{hosts}/{database}?target_session_attrs=read-write"

    def node_url(self, name: str, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.ports[name]}/{database}"

    @property
    def monitor_url(self) -> str:
        return f"postgresql://autoctl_node@127.0.0.1:{self.monitor_port}/{MONITOR_DB}"

    # --- life -------------------------------------------------------------------------------

    def _as_postgres(self, *argv: str) -> list[str]:
        """``argv`` as the ``postgres`` user when we are root, with the server binaries on
        the PATH (pg_autoctl calls pg_ctl and initdb by name)."""
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        return [*prefix, "env", f"PATH={self.env['PATH']}", *argv]

    def _command(self, *args: str) -> list[str]:
        return self._as_postgres("pg_autoctl", *args)

    def _spawn(self, name: str, *args: str) -> None:
        with open(self.dir / f"{name}.log", "ab") as log:  # the child keeps its own copy
            process = subprocess.Popen(self._command(*args), stdout=log, stderr=log, env=self.env)
        self.processes.append(process)
        self.keepers[name] = process

    def start(self, within_s: float = 180) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        common = ["--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl"]
        monitor = str(self.dir / "monitor")
        subprocess.run(
            self._command(
                "create", "monitor", "--pgdata", monitor, "--pgport", str(self.monitor_port),
                *common,
            ),
            check=True, capture_output=True, env=self.env, timeout=120,
        )  # fmt: skip
        # The monitor waits this long for a primary it found unhealthy to confirm its own
        # demotion before it promotes the standby (default 30 s). The tests' primary is
        # killed with its keeper and never answers: the whole wait is dead time.
        with open(Path(monitor) / "postgresql.conf", "a") as conf:
            conf.write(f"\npgautofailover.primary_demote_timeout = '{DEMOTE_TIMEOUT}'\n")
        self._spawn("monitor", "run", "--pgdata", monitor)
        for name, port in self.ports.items():
            # One node at a time: the first becomes the primary, the second its standby.
            self._spawn(
                name, "create", "postgres", "--pgdata", str(self.dir / name),
                "--pgport", str(port), "--monitor", f"{self.monitor_url}?sslmode=disable",
                "--run", *common,
            )  # fmt: skip
            self.wait_for(functools.partial(self.joined, name), within_s, f"{name} joins")
        self.wait_for(self.healthy, within_s, "a primary and a synchronous standby")

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        for process in self.processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
        for name in (*NODES, "monitor"):  # whatever a keeper left running
            data = self.dir / name
            if (data / "postmaster.pid").exists():
                subprocess.run(
                    self._as_postgres(
                        str(postgres_bindir() / "pg_ctl"), "-D", str(data), "-m", "immediate",
                        "stop",
                    ),
                    capture_output=True, check=False, env=self.env, timeout=60,
                )  # fmt: skip
        shutil.rmtree(self.dir, ignore_errors=True)

    # --- state ------------------------------------------------------------------------------

    def states(self) -> dict[str, tuple[str, str]]:
        """(reported, goal) state per node name, as the monitor has them (call it from a
        thread when an event loop runs: ``asyncio.to_thread``)."""

        async def read() -> dict[str, tuple[str, str]]:
            conn = await asyncpg.connect(
                f"postgresql://postgres@127.0.0.1:{self.monitor_port}/{MONITOR_DB}", timeout=5
            )
            try:
                rows = await conn.fetch(
                    "SELECT nodeport, reportedstate::text, goalstate::text FROM pgautofailover.node"
                )
            finally:
                await conn.close()
            by_port = {port: name for name, port in self.ports.items()}
            return {by_port[r[0]]: (r[1], r[2]) for r in rows if r[0] in by_port}

        try:
            return asyncio.run(read())
        except (OSError, asyncpg.PostgresError):
            return {}

    def events(self) -> list[tuple[datetime, str, str, str]]:
        """The monitor's log of state changes: (when, node name, reported, goal), oldest
        first (from a thread, as :meth:`states`)."""

        async def read() -> list[tuple[datetime, str, str, str]]:
            conn = await asyncpg.connect(
                f"postgresql://postgres@127.0.0.1:{self.monitor_port}/{MONITOR_DB}", timeout=5
            )
            try:
                rows = await conn.fetch(
                    "SELECT eventtime, nodeport, reportedstate::text, goalstate::text "
                    "FROM pgautofailover.event ORDER BY eventid"
                )
            finally:
                await conn.close()
            by_port = {port: name for name, port in self.ports.items()}
            return [(r[0], by_port.get(r[1], str(r[1])), r[2], r[3]) for r in rows]

        try:
            return asyncio.run(read())
        except (OSError, asyncpg.PostgresError):
            return []

    def joined(self, name: str) -> bool:
        return name in self.states()

    def primary(self) -> str | None:
        for name, (reported, goal) in self.states().items():
            if reported == goal == "primary":
                return name
        return None

    def writable(self) -> str | None:
        """The node that takes writes: a primary, or one in ``wait_primary`` (promoted, or its
        standby gone: synchronous replication is off until a standby is back)."""
        for name, (reported, goal) in self.states().items():
            if reported in ("primary", "wait_primary") and goal in ("primary", "wait_primary"):
                return name
        return None

    def healthy(self) -> bool:
        states = self.states()
        return sorted(reported for reported, goal in states.values() if reported == goal) == [
            "primary",
            "secondary",
        ]

    def kill_primary(self) -> str:
        """SIGKILL the primary's keeper and then its postmaster (its backends die with it), as
        when its machine dies; return its name. A live keeper restarts Postgres within a second,
        and the monitor, seeing it healthy again, may never promote the standby: the node stays
        down, and the monitor fails over once it has been unhealthy for its timeout (20 s)."""
        name = self.primary()
        assert name is not None, self.states()
        keeper = self.keepers[name]
        tree = [keeper.pid, *descendants(keeper.pid)]
        for pid in tree:  # stopped first: none of them starts anything while the rest die
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        postmaster = int((self.dir / name / "postmaster.pid").read_text().split()[0])
        with contextlib.suppress(ProcessLookupError):  # a child of the keeper, or reparented
            os.kill(postmaster, signal.SIGKILL)
        keeper.wait(timeout=30)
        return name

    def wait_for(self, condition: Callable[[], bool], within_s: float, what: str) -> None:
        deadline = time.monotonic() + within_s
        while not condition():
            if time.monotonic() > deadline:
                logs = {
                    p.name: p.read_text(errors="replace")[-1500:] for p in self.dir.glob("*.log")
                }
                raise AssertionError(f"{what}: not within {within_s} s; {self.states()}; {logs}")
            time.sleep(0.5)
