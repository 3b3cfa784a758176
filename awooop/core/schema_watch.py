"""The schema watch of a long-running process: its row in the fleet's registry
(awooop/core/processes.py) and the schema check, again every ``interval_s``
(``AWOOOP_SCHEMA_RECHECK_S``) after the one at start.

So a process notices a schema it can no longer run on after it started: a contract migration
that raised the floor above its release, or a database that came back from a reconnect, a
failover or a restore without its release's migrations. It then logs
``schema_no_longer_runnable`` with E-MIGRATE-003 and stops the way an operator stops it
(SIGTERM: it finishes or hands back its work and exits); started again, it refuses at the start
check with the same code. A database that does not answer, refuses or is slow is no verdict:
the watch tries again at the next interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from awooop.core.db import Database
from awooop.core.errors import DatabaseUnavailableError, SchemaMismatchError
from awooop.core.logs import get_logger
from awooop.core.processes import NO_ROUTES, Serves, deregister, register
from awooop.core.retries import CONNECTION_ERRORS
from awooop.core.schema_check import read_schema_state, release_name

log = get_logger(__name__)

DB_TIMEOUT_S = 5.0
WATCH_ERRORS: tuple[type[BaseException], ...] = (DatabaseUnavailableError, *CONNECTION_ERRORS)


def stop_this_process() -> None:
    os.kill(os.getpid(), signal.SIGTERM)


def new_instance() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass
class SchemaWatch:
    db: Database
    kind: str
    interval_s: float
    on_unrunnable: Callable[[], None] = stop_this_process
    instance: str = field(default_factory=new_instance)
    serves: Serves = NO_ROUTES  # a worker's routes and handler version, in its row
    _task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        async with self.db.platform_writes(timeout_s=DB_TIMEOUT_S) as conn:
            await register(
                conn, self.instance, self.kind, release_name(), self.interval_s, self.serves
            )
        log.info("process_registered", instance=self.instance, release=release_name())
        self._task = asyncio.create_task(self._watch(), name=f"schema-watch-{self.kind}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        with contextlib.suppress(*WATCH_ERRORS):
            async with self.db.platform_writes(timeout_s=DB_TIMEOUT_S) as conn:
                await deregister(conn, self.instance)

    async def check_once(self) -> bool:
        """Check the schema and refresh the row; False when this release cannot run on it."""
        async with self.db.platform_writes(timeout_s=DB_TIMEOUT_S) as conn:
            state = await read_schema_state(conn)
            if state.runnable:
                await register(
                    conn, self.instance, self.kind, release_name(), self.interval_s, self.serves
                )
        if not state.runnable:
            log.error(
                "schema_no_longer_runnable", code=SchemaMismatchError.code, problem=state.problem()
            )
        return state.runnable

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                runnable = await self.check_once()
            except WATCH_ERRORS as exc:
                log.warning("schema_check_skipped", error=str(exc))
                continue
            if not runnable:
                self.on_unrunnable()
                return
