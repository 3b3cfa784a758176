"""Running an online migration: its steps (awooop/core/online_plan.py), each holding its locks
briefly, retried when a lock is not granted within ``lock_timeout``, with progress in the log.

The steps run on the migrator's connection, outside any transaction of its own, after the
earlier files are applied and before the file is recorded. A completed step is remembered in
``awooop_online_migration_steps`` (migration 0125); a migrator killed mid-way leaves the steps
before it remembered and the current one either undone (a rolled-back batch or DDL) or half
done in a way the next run finds in the catalogue (validated partitions, attached indexes, an
invalid index left by an interrupted CONCURRENTLY build, which it drops first). Batches are
written so that running them again changes only rows that still need it. The file is recorded
in ``awooop_schema_migrations`` only once every step completed.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, TypeVar

import asyncpg

from awooop.core.db import Connection
from awooop.core.errors import ConfigError, OnlineMigrationBlockedError
from awooop.core.logs import get_logger
from awooop.core.migration_checksums import normalised_checksum
from awooop.core.online_plan import (
    WHOLE_FILE_LOCK_TIMEOUT_S,
    Kind,
    Policy,
    Progress,
    Step,
    next_batch_size,
    partition_index_name,
    plan,
    retry_delay,
)
from awooop.core.pools import milliseconds

log = get_logger(__name__)
T = TypeVar("T")

SQL: dict[str, str] = {
    entry.name.removesuffix(".sql"): entry.read_text(encoding="utf-8")
    for entry in (resources.files(__package__) / "sql").iterdir()
    if entry.name.startswith("online_") and entry.name.endswith(".sql")
}
RESET_TIMEOUTS = "RESET lock_timeout; RESET statement_timeout"
STEPS_TABLE_EXISTS = "SELECT to_regclass('awooop_online_migration_steps') IS NOT NULL"
# A lock not granted in time, and two transactions in each other's way: worth another try.
# QueryCanceledError: a batch over statement_timeout (tried again smaller) or a cancelled build.
RETRYABLE: tuple[type[BaseException], ...] = (
    asyncpg.LockNotAvailableError,
    asyncpg.SerializationError,
    asyncpg.DeadlockDetectedError,
    asyncpg.QueryCanceledError,
)


def quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def rows_changed(status: str) -> int:
    """The row count of a command tag (``UPDATE 12``, ``INSERT 0 12``, ``DELETE 0``)."""
    last = status.rsplit(" ", 1)[-1]
    return int(last) if last.isdigit() else 0


@dataclass
class OnlineReport:
    """What one run of an online migration did (the benchmark reads it)."""

    migration: str
    steps_run: int = 0
    steps_skipped: int = 0
    rows: int = 0
    retries: int = 0
    longest_lock_wait_s: float = 0.0  # the longest attempt that ended in a lock timeout
    seconds: float = 0.0
    retry_errors: list[str] = field(default_factory=list)


async def apply_online(
    conn: Connection, name: str, sql: str, policy: Policy | None = None
) -> OnlineReport:
    """Run every step of online migration ``name`` not completed yet. The caller records the
    file (and calls :func:`forget_steps` in the same transaction)."""
    runner = _Runner(conn, name, policy or Policy())
    await runner.run(plan(name, sql))
    return runner.report


async def apply_whole(
    conn: Connection, name: str, sql: str, record: tuple[Any, ...], policy: Policy | None = None
) -> OnlineReport:
    """A file that is not online: all of it and ``record`` (a statement and its arguments) in
    one transaction under a short lock_timeout (WHOLE_FILE_LOCK_TIMEOUT_S), tried again whole
    after a lock timeout or a deadlock, so that a lock cycle with a runtime transaction ends
    with the migrator giving way, never with the runtime's statement failing."""
    runner = _Runner(conn, name, policy or Policy(lock_timeout_s=WHOLE_FILE_LOCK_TIMEOUT_S))
    await runner._in_transaction(sql, "the whole file", statement_timeout_s=0.0, also=record)
    return runner.report


async def forget_steps(conn: Connection, name: str) -> None:
    await conn.execute(SQL["online_forget"], name)


class _Runner:
    def __init__(self, conn: Connection, name: str, policy: Policy) -> None:
        self.conn, self.name, self.policy = conn, name, policy
        self.report = OnlineReport(name)
        self.step: Step | None = None

    async def run(self, steps: list[Step]) -> None:
        if not await self.conn.fetchval(STEPS_TABLE_EXISTS):
            raise ConfigError(
                f"{self.name} is an online migration: it needs awooop_online_migration_steps "
                "(0125_online_migration_steps.sql) applied before it"
            )
        recorded = await self.conn.fetch(SQL["online_steps_done"], self.name)
        done = {r["step"]: r["checksum"] for r in recorded}
        started = time.monotonic()
        log.info(
            "online_migration_started",
            migration=self.name,
            steps=len(steps),
            steps_done=sum(1 for s in steps if done.get(s.number) == _checksum(s)),
        )
        try:
            for step in steps:
                if done.get(step.number) == _checksum(step):
                    self.report.steps_skipped += 1
                    continue
                self.step = step
                log.info(
                    "online_migration_step",
                    migration=self.name,
                    step=step.number,
                    kind=step.kind.value,
                    table=step.table,
                    name=step.name,
                )
                rows = await self._run_step(step)
                await self.conn.execute(
                    SQL["online_step_done"], self.name, step.number, _checksum(step), rows
                )
                self.report.steps_run += 1
                self.report.rows += rows
        finally:
            # A lost connection ends the session and its settings: the first error is the one.
            with contextlib.suppress(asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
                await self._session_timeouts(None, None)
            self.report.seconds = time.monotonic() - started
        log.info(
            "online_migration_steps_done",
            migration=self.name,
            rows=self.report.rows,
            retries=self.report.retries,
            seconds=round(self.report.seconds, 1),
        )

    async def _run_step(self, step: Step) -> int:
        if step.kind is Kind.BATCH:
            return await self._batches(step)
        if step.kind is Kind.INDEX:
            return await self._index(step)
        if step.kind is Kind.VALIDATE:
            return await self._validate(step)
        if step.kind is Kind.AUTOCOMMIT:
            await self._concurrently(step.sql, "statement")
            return 0
        # Recorded in the statement's own transaction: run again, it would fail or repeat.
        done = (SQL["online_step_done"], self.name, step.number, _checksum(step), 0)
        await self._in_transaction(step.sql, "statement", also=done)
        return 0

    # --- the kinds of step -------------------------------------------------------------------

    async def _batches(self, step: Step) -> int:
        assert step.table is not None
        total = await self._estimate(step.table)
        size = self.policy.first_batch
        done, started, logged = 0, time.monotonic(), time.monotonic()

        async def one_batch() -> int:
            async with self.conn.transaction():
                await self._transaction_timeouts(self.policy.batch_statement_timeout_s)
                return rows_changed(await self.conn.execute(step.sql, size))

        async def smaller() -> None:
            nonlocal size
            size = max(self.policy.min_batch, size // 2)

        while True:
            began = time.monotonic()
            changed = await self._retrying(f"batch of {size}", one_batch, smaller)
            done += changed
            if changed == 0:
                break
            size = next_batch_size(size, time.monotonic() - began, self.policy)
            if time.monotonic() - logged >= self.policy.progress_every_s:
                logged = time.monotonic()
                self._progress(done, total, started, batch=size)
        self._progress(done, total, started)
        return done

    async def _index(self, step: Step) -> int:
        assert step.table is not None and step.name is not None
        kind, total = await self._relation(step.table)
        started, done = time.monotonic(), 0
        if kind != "p":
            await self._build_concurrently(step, step.name, step.table)
            self._progress(total, total, started)
            return total
        # The parent's index ON ONLY the partitioned table: a catalogue entry, invalid until every
        # partition has its index attached (this takes a SHARE lock on the parent, briefly).
        await self._in_transaction(
            step.index_sql(quoted(step.name), quoted(step.table), only=True, concurrently=False),
            "parent index",
        )
        while pending := [
            p
            for p in await self.conn.fetch(SQL["online_partitions"], step.table)
            if not await self.conn.fetchval(SQL["online_index_attached"], step.name, p["name"])
        ]:
            for part in pending:
                child = partition_index_name(step.name, step.table, part["name"])
                await self._build_concurrently(step, child, part["name"])
                await self._in_transaction(
                    f"ALTER INDEX {quoted(step.name)} ATTACH PARTITION {quoted(child)}",
                    f"attach {child}",
                )
                done += part["rows"]
                self._progress(done, total, started, partition=part["name"])
        if not await self.conn.fetchval(SQL["online_index_state"], step.name):
            raise ConfigError(
                f"{self.name}: index {step.name} is not valid with every partition's attached "
                "(a partition that is partitioned itself is not supported)"
            )
        return done

    async def _build_concurrently(self, step: Step, index: str, table: str) -> None:
        async def drop_invalid() -> None:
            if await self.conn.fetchval(SQL["online_index_state"], index) is False:
                log.info("online_migration_invalid_index_dropped", migration=self.name, index=index)
                await self._concurrently(
                    f"DROP INDEX CONCURRENTLY IF EXISTS {quoted(index)}", f"drop invalid {index}"
                )

        await drop_invalid()  # left by an interrupted build: IF NOT EXISTS would keep it
        build = step.index_sql(quoted(index), quoted(table), only=False, concurrently=True)
        await self._concurrently(build, f"build {index}", drop_invalid)

    async def _validate(self, step: Step) -> int:
        assert step.table is not None and step.name is not None
        pending = await self.conn.fetch(SQL["online_unvalidated"], step.table, step.name)
        total = sum(p["rows"] for p in pending)
        started, done = time.monotonic(), 0
        for part in pending:
            await self._in_transaction(
                f"ALTER TABLE {quoted(part['name'])} VALIDATE CONSTRAINT {quoted(step.name)}",
                f"validate {part['name']}",
                statement_timeout_s=0.0,
            )
            done += part["rows"]
            self._progress(done, total, started, partition=part["name"])
        # The parent (or a plain table): with every partition validated, no scan.
        await self._in_transaction(step.sql, "validate", statement_timeout_s=0.0)
        return done

    # --- how each statement runs -------------------------------------------------------------

    async def _in_transaction(
        self,
        sql: str,
        what: str,
        *,
        statement_timeout_s: float | None = None,
        also: tuple[Any, ...] | None = None,
    ) -> None:
        """``sql`` in its own transaction under lock_timeout (and ``also``, a statement and its
        arguments), retried."""
        timeout = (
            self.policy.batch_statement_timeout_s
            if statement_timeout_s is None
            else statement_timeout_s
        )

        async def once() -> None:
            async with self.conn.transaction():
                await self._transaction_timeouts(timeout)
                await self.conn.execute(sql)
                if also is not None:
                    await self.conn.execute(*also)

        await self._retrying(what, once)

    async def _concurrently(
        self, sql: str, what: str, on_failure: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        async def once() -> None:
            await self._session_timeouts(self.policy.concurrent_lock_timeout_s, 0.0)
            try:
                await self.conn.execute(sql)
            finally:
                await self._session_timeouts(None, None)

        await self._retrying(what, once, on_failure)

    async def _retrying(
        self,
        what: str,
        once: Callable[[], Awaitable[T]],
        on_failure: Callable[[], Awaitable[None]] | None = None,
    ) -> T:
        attempt = 0
        while True:
            attempt += 1
            began = time.monotonic()
            try:
                return await once()
            except RETRYABLE as exc:
                waited = time.monotonic() - began
                if isinstance(exc, asyncpg.LockNotAvailableError):
                    self.report.longest_lock_wait_s = max(self.report.longest_lock_wait_s, waited)
                if on_failure is not None:
                    await on_failure()
                delay = retry_delay(attempt, self.policy, random.random())
                step = self.step.number if self.step else 0
                part = f"online migration {self.name}, step {step}" if step else self.name
                if delay is None:
                    raise OnlineMigrationBlockedError(
                        f"{part} ({what}): not done after {attempt} attempts, the last failing "
                        f"with {exc.__class__.__name__}: {exc}. A transaction holds what it "
                        "needs (see pg_locks and pg_stat_activity). Nothing of it was kept; "
                        "what came before stays done, and `awooop migrate` run again "
                        "continues from here"
                    ) from exc
                self.report.retries += 1
                self.report.retry_errors.append(exc.__class__.__name__)
                log.warning(
                    "online_migration_retry" if step else "migration_retry",
                    migration=self.name,
                    step=step,
                    what=what,
                    attempt=attempt,
                    error=exc.__class__.__name__,
                    waited_s=round(waited, 2),
                    retry_in_s=round(delay, 2),
                )
                await asyncio.sleep(delay)

    async def _transaction_timeouts(self, statement_timeout_s: float) -> None:
        await self.conn.execute(
            SQL["online_timeouts"],
            _ms(self.policy.lock_timeout_s),
            _ms(statement_timeout_s),
            True,
        )

    async def _session_timeouts(self, lock_s: float | None, statement_s: float | None) -> None:
        """Set both for the session (None: back to the server's defaults)."""
        if lock_s is None or statement_s is None:
            await self.conn.execute(RESET_TIMEOUTS)
            return
        await self.conn.execute(SQL["online_timeouts"], _ms(lock_s), _ms(statement_s), False)

    # --- estimates and progress --------------------------------------------------------------

    async def _relation(self, table: str) -> tuple[str, int]:
        row = await self.conn.fetchrow(SQL["online_relation"], table)
        if row is None or row["kind"] is None:
            raise ConfigError(f"{self.name}: table {table} does not exist")
        return row["kind"], row["rows"]

    async def _estimate(self, table: str) -> int:
        return (await self._relation(table))[1]

    def _progress(self, done: int, total: int, started: float, **extra: object) -> None:
        step = self.step.number if self.step else 0
        fields = Progress(done, total, time.monotonic() - started).fields()
        log.info("online_migration_progress", migration=self.name, step=step, **fields, **extra)


def _ms(seconds: float) -> str:
    """A timeout setting: 0 is no bound."""
    return milliseconds(seconds) if seconds > 0 else "0"


def _checksum(step: Step) -> str:
    return normalised_checksum(step.sql)
