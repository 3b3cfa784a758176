"""The suite's share of the test server's Postgres connections, split between its test
processes, so that tests running side by side never open more than the server has free.

The first test process to ask measures what the server has free (other users' connections
already counted out), keeps some slack for clients that connect later, and writes that budget
to a file that every process of the run shares (``PYTEST_XDIST_TESTRUNUID`` names it). Before a
test takes its database it reserves the most connections it opens at once (its
``pytest.mark.connections(n)``, else ``DEFAULT``) and waits in line until the budget has
room; a test asking more than the whole budget gets the whole budget, and fits its
worker pools into it (tests/support/connections.py). Smaller reservations that fit may pass one
that waits, until it has waited ``PATIENCE_S``: then nobody passes it, and the tests running
drain until it fits (so a wide test neither starves nor leaves the other processes idle while
it waits its turn). A process that dies leaves its reservation
behind; the next process to look drops it. A holder is a process's incarnation, its id and
its start time (:func:`incarnation`), not its id alone: process ids are reused (this machine
wraps at 32,768), and a new process that got a dead one's id found that reservation under
its own id and failed every test it ran.

The bookkeeping is a pure function of the shared state (``admit``), the file and its lock are
the edge.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import asyncpg
import msgspec

# What most tests open at once: their own pools, the fixture's tenant and platform pools and a
# short admin connection to create or drop their database (a peak of 6 or less for 9 in 10 of
# them). A test that opens more carries its measured peak and a quarter more (at least 2).
DEFAULT = 8

PATIENCE_S = 10.0

FREE_CONNECTIONS = """
SELECT current_setting('max_connections')::int
     - current_setting('superuser_reserved_connections')::int
     - count(*) FILTER (WHERE backend_type = 'client backend' AND pid <> pg_backend_pid())::int
FROM pg_stat_activity
"""


class Shared(msgspec.Struct):
    """The run's budget, who holds how much of it, and who waits since when (the process's
    :func:`incarnation` and time.time()), in the order they asked."""

    budget: int
    held: dict[str, int] = msgspec.field(default_factory=dict)
    waiting: list[tuple[str, float]] = msgspec.field(default_factory=list)


def slack(free: int) -> int:
    """Connections left out of the budget for clients that connect after it was measured."""
    return max(5, free // 10)


def admit(state: Shared, holder: str, wanted: int, alive: Callable[[str], bool], now: float) -> int:
    """Admit ``holder``'s reservation of ``wanted`` connections (capped at the budget) when it
    fits and nobody ahead of it in line has waited ``PATIENCE_S``; returns the connections
    granted, 0 when it must wait (it is then in line). Reservations and places of dead
    processes are dropped first."""
    for dead in [p for p in state.held if not alive(p)]:
        del state.held[dead]
    state.waiting = [(p, since) for p, since in state.waiting if alive(p) or p == holder]
    if holder in state.held:
        raise RuntimeError(f"process {holder} already holds {state.held[holder]} connections")
    if all(p != holder for p, _ in state.waiting):
        state.waiting.append((holder, now))
    ahead = [since for p, since in itertools.takewhile(lambda w: w[0] != holder, state.waiting)]
    granted = max(1, min(wanted, state.budget))
    if any(now - since >= PATIENCE_S for since in ahead):
        return 0
    if sum(state.held.values()) + granted > state.budget:
        return 0
    release(state, holder)
    state.held[holder] = granted
    return granted


def release(state: Shared, holder: str) -> None:
    state.held.pop(holder, None)
    state.waiting = [(p, since) for p, since in state.waiting if p != holder]


def incarnation(pid: int) -> str | None:
    """``"<pid>:<start time>"`` of the running process ``pid`` (its start in clock ticks
    after boot, from /proc), which no later process with the same id shares; None when no
    process has the id."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    # The command name (in parentheses) may hold spaces; the start time is the 22nd field.
    return f"{pid}:{stat.rsplit(')', 1)[1].split()[19]}"


def process_alive(holder: str) -> bool:
    """Whether the process incarnation ``holder`` still runs."""
    return incarnation(int(holder.split(":", 1)[0])) == holder


def me() -> str:
    own = incarnation(os.getpid())
    assert own is not None  # this process runs
    return own


def shared_path() -> Path:
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid{me().replace(':', '-')}"
    return Path(tempfile.gettempdir()) / f"awooop-pg-budget-{run}.json"


@contextmanager
def locked(path: Path) -> Iterator[Shared | None]:
    """The shared state under an exclusive lock of the run's processes (None before the budget
    was measured); the caller writes back what it changes."""
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield msgspec.json.decode(path.read_bytes(), type=Shared) if path.exists() else None
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def write(path: Path, state: Shared) -> None:
    scratch = path.with_suffix(f".{os.getpid()}")
    scratch.write_bytes(msgspec.json.encode(state))
    scratch.replace(path)


def forget_old_runs(path: Path, older_than_s: float = 86400.0) -> None:
    """Remove the files earlier runs left beside ``path`` (nothing removes them at the end of
    a run: no process knows it is the last)."""
    cutoff = time.time() - older_than_s
    for old in path.parent.glob("awooop-pg-budget-*"):
        with contextlib.suppress(FileNotFoundError):
            if old.stat().st_mtime < cutoff:
                old.unlink()


async def measure(server_url: str) -> int:
    conn = await asyncpg.connect(server_url)
    try:
        free: int = await conn.fetchval(FREE_CONNECTIONS)
    finally:
        await conn.close()
    return free - slack(free)


class Budget:
    """This process's reservations from the run's shared budget on one server."""

    def __init__(self, server_url: str, path: Path | None = None) -> None:
        self.server_url = server_url
        self.path = path or shared_path()

    async def total(self) -> int:
        with locked(self.path) as state:
            if state is not None:
                return state.budget
            budget = await measure(self.server_url)
            write(self.path, Shared(budget=budget))
        forget_old_runs(self.path)
        return budget

    async def reserve(self, wanted: int, within_s: float = 900.0) -> int:
        """Wait for ``wanted`` connections (the whole budget if it is smaller); the number
        granted. Fails the test after ``within_s`` saying who holds the budget."""
        await self.total()
        holder, deadline = me(), time.monotonic() + within_s
        while True:
            with locked(self.path) as state:
                assert state is not None
                granted = admit(state, holder, wanted, process_alive, time.time())
                write(self.path, state)
            if granted:
                return granted
            if time.monotonic() > deadline:
                self.cancel()
                raise TimeoutError(
                    f"waited {within_s:.0f} s for {wanted} of the suite's {state.budget} "
                    f"Postgres connections; held: {state.held}, in line: {state.waiting}"
                )
            await asyncio.sleep(0.1)

    def cancel(self) -> None:
        with locked(self.path) as state:
            if state is not None:
                release(state, me())
                write(self.path, state)
