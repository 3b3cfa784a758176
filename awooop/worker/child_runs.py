"""``run.start_child`` and ``run.wait_for_children``: child runs with fan-in (docs/workers.md,
Child runs).

``start_child(contract, input, key=...)`` creates a run of the parent's project through intake
(:func:`awooop.ingest.ingest_write.ingest`: the dedupe key ``child:<parent run id>:<key>`` in
channel ``api``, the contract's ``max_attempts``, concurrency key, queue depth cap and fair
tag, as any run gets them) in ONE transaction with the parent's journal entry (step
``child:<key>``, the :class:`ChildHandle`), fenced by the parent's lease, and refused
(E-CHILD-002, nothing written) when the parent already has AWOOOP_CHILDREN_PENDING_MAX
unfinished children, counted under the parent's row lock. A crash before the commit leaves
neither; after it, the replay returns the journaled handle and creates nothing: a key names
one child, whatever happens to the worker.

``wait_for_children(handles, count=None, timeout=None)`` waits for all of them, or the first
``count``: it ends the attempt like ``run.wait_for_event`` (WAITING_EVENT, no slot, no lease)
unless enough have finished already (:func:`awooop.runs.children.start_wait`), and the run is
resumed by the write of the child that makes enough finished
(:mod:`awooop.eventlog.child_waits`), or by the timers loop at the timeout (E-CHILD-001 raised
to the handler). It returns one :class:`ChildResult` per handle, in their order, as journaled
(step ``children:<n>``, or ``children:<name>``), so a replay returns the same.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import msgspec

from awooop.core import metrics
from awooop.core.config import Settings
from awooop.core.db import Connection, Database
from awooop.core.errors import (
    ChildKeyTakenError,
    ChildLimitError,
    ChildrenWaitTimeoutError,
    InvalidInputError,
    LeaseLostError,
    PayloadTooLargeError,
)
from awooop.core.events import StepCompleted
from awooop.core.retries import unavailable_on_store_errors
from awooop.core.telemetry import tracer
from awooop.eventlog import child_waits
from awooop.eventlog.child_state import (
    CHILD_CHANNEL,
    CHILD_STEP_PREFIX,
    CHILDREN_STEP_PREFIX,
    ChildHandle,
    ChildResult,
    decoded,
    dedupe_key,
    filled,
    handle_of,
    left_in_children,
    needed_of,
)
from awooop.eventlog.wait_state import CHILDREN, TIMEOUT, due_of, ended
from awooop.ingest import ingest_write
from awooop.ingest.common import ParsedEvent
from awooop.runs import children, leases, run_rows, signals
from awooop.worker.attempts import Attempt, trace_metadata
from awooop.worker.durable_waits import AttemptWaits, Waiting

__all__ = ("ChildHandle", "ChildResult", "ChildRuns", "ChildRunsMixin")


def check_input(value: Any, max_bytes: int) -> Any:
    """Pure: a child's input as JSON builtins, at most ``max_bytes`` encoded."""
    try:
        encoded = msgspec.json.encode(value)
    except (TypeError, msgspec.EncodeError) as exc:
        raise InvalidInputError(f"a child run's input must be JSON: {exc}") from None
    if len(encoded) > max_bytes:
        raise PayloadTooLargeError(
            f"a child run's input is at most {max_bytes} bytes as JSON ({len(encoded)} given)"
        )
    if "\\u0000" in encoded.decode():
        raise InvalidInputError("a child run's input cannot hold the character \\u0000")
    return msgspec.json.decode(encoded)


class ChildRuns(AttemptWaits):
    """The child runs of one attempt (module doc)."""

    def __init__(
        self,
        *,
        db: Database,
        attempt: Attempt,
        steps: Mapping[str, Any],  # the run's saga_steps as the attempt began
        use: Callable[[str], None],  # marks a step name used (E-HANDLER-003 on a second use)
        io_timeout_s: float | None,
        settings: Settings | None,
    ) -> None:
        super().__init__(db=db, attempt=attempt, steps=steps, use=use, io_timeout_s=io_timeout_s)
        self._settings = settings or Settings()
        self._waits = 0

    async def start(
        self, contract: str, value: Any, key: str, cancel_with_parent: bool
    ) -> ChildHandle:
        signals.check_name(key, "child key")
        signals.check_name(contract, "contract")
        value = check_input(value, self._settings.http_max_body_bytes)
        step = CHILD_STEP_PREFIX + key
        self._use(step)
        entry = self._entries.get(step)
        if entry is not None:
            return handle_of(entry.get("result"))
        handle = await self._created(contract, value, key, cancel_with_parent)
        self._entries[step] = {"result": msgspec.to_builtins(handle)}
        return handle

    # --- the I/O, which the test kit (awooop.testing) does in memory -------------------------

    async def _created(
        self, contract: str, value: Any, key: str, cancel_with_parent: bool
    ) -> ChildHandle:
        """The child run and the parent's journal entry, in one transaction."""
        attempt = self._attempt
        with tracer.start_as_current_span(
            f"start_child {key}",
            attributes={"awooop.run_id": str(attempt.run_id), "awooop.child_key": key},
        ):
            meta = {k: v for k, v in trace_metadata().items() if k != "run_span"}
            meta.update(source="child", parent_run_id=str(attempt.run_id))

            async def write(conn: Connection) -> ChildHandle:
                return await self._create(conn, contract, value, key, cancel_with_parent, meta)

            with unavailable_on_store_errors("the child run could not be written"):
                handle: ChildHandle = await self._db.in_tenant(
                    attempt.project_id, write, timeout_s=self._io_timeout_s
                )
        metrics.CHILD_RUNS_STARTED.inc()
        return handle

    async def _create(
        self,
        conn: Connection,
        contract: str,
        value: Any,
        key: str,
        cancel_with_parent: bool,
        meta: dict[str, Any],
    ) -> ChildHandle:
        attempt, settings = self._attempt, self._settings
        run_id, project_id = attempt.run_id, attempt.project_id
        state, now = await run_rows.lock(conn, run_id)
        problem = leases.fence_problem(state, now, attempt.worker_id, attempt.number)
        if problem is not None:
            raise LeaseLostError(f"write refused: {problem}", run_id=run_id)
        pending = await children.pending_count(conn, run_id)
        if pending >= settings.children_pending_max:
            raise ChildLimitError(run_id=run_id, pending=pending)
        config = await ingest_write.load_producer_config(
            conn, settings, project_id, CHILD_CHANNEL, contract
        )
        [outcome] = await ingest_write.ingest(
            conn,
            project_id,
            CHILD_CHANNEL,
            [ParsedEvent(dedupe_key(run_id, key), value)],
            config=config,
            contract_id=contract,
            metadata=meta,
            parent=(run_id, cancel_with_parent),
        )
        if not outcome.created:
            existing = await run_rows.load(conn, outcome.run_id)
            if existing is None or existing.parent_run_id != run_id:
                raise ChildKeyTakenError(run_id=run_id, key=key, taken_by=outcome.run_id)
        handle = ChildHandle(run_id=outcome.run_id, key=key, contract=contract)
        step, result = CHILD_STEP_PREFIX + key, msgspec.to_builtins(handle)
        await leases.fenced_record(
            conn,
            run_id,
            attempt.worker_id,
            attempt.number,
            lambda _s, at: StepCompleted(
                at=at, worker_id=attempt.worker_id, attempt=attempt.number, step=step, result=result
            ),
            trace_metadata(),
        )
        return handle

    async def wait(
        self,
        handles: Sequence[ChildHandle],
        count: int | None,
        time_out: timedelta | None,
        name: str | None,
    ) -> list[ChildResult]:
        ids = [h.run_id for h in _handles(handles)]
        if len(set(ids)) != len(ids):
            raise InvalidInputError("wait_for_children: each child once")
        if len(ids) > self._settings.children_pending_max:
            raise InvalidInputError(
                f"wait_for_children: at most {self._settings.children_pending_max} children "
                "in one wait (AWOOOP_CHILDREN_PENDING_MAX)"
            )
        try:
            needed = needed_of(count, len(ids))
        except ValueError as exc:
            raise InvalidInputError(f"wait_for_children: {exc}") from None
        if time_out is not None and time_out.total_seconds() <= 0:
            raise InvalidInputError("a wait's timeout is a positive duration (or None)")
        self._waits += 1
        step = CHILDREN_STEP_PREFIX + (
            str(self._waits) if name is None else signals.check_name(name, "wait name")
        )
        self._use(step)
        entry = self._entries.get(step)
        due_at: datetime | None = None
        if entry is not None:
            how = None if "kind" not in entry else ended(entry)
            if "kind" not in entry or how == CHILDREN:
                return await self._filled(entry.get("result"))
            due_at = due_of(entry)
            if how == TIMEOUT or (due_at is not None and due_at <= self._now()):
                raise ChildrenWaitTimeoutError(
                    f"fewer than {needed} of {len(ids)} children finished before the timeout"
                )
        attempt = self._attempt
        attempt.finishing = True  # the wait releases the lease with its write
        try:
            found = await self._start_wait(step, ids, needed, time_out, due_at)
        except BaseException:
            attempt.finishing = False
            raise
        if found is not None:
            attempt.finishing = False  # enough had finished: the attempt goes on
            self._entries[step] = {"result": msgspec.to_builtins(found)}
            return list(found)
        raise Waiting(step)

    async def _filled(self, journaled: Any) -> list[ChildResult]:
        """Journaled outcomes, with the results the journal left in the children's rows
        (:data:`awooop.eventlog.child_state.RESULTS_INLINE_MAX_BYTES`) read back."""
        ids = left_in_children(journaled)
        if not ids:
            return decoded(journaled)
        attempt = self._attempt
        with unavailable_on_store_errors("the children's results could not be read"):
            stored: dict[uuid.UUID, Any] = await self._db.in_tenant(
                attempt.project_id,
                lambda conn: child_waits.results(conn, attempt.run_id, ids),
                timeout_s=self._io_timeout_s,
            )
        return filled_or_gone(journaled, stored)

    async def _start_wait(
        self,
        step: str,
        ids: list[uuid.UUID],
        needed: int,
        time_out: timedelta | None,
        due_at: datetime | None,
    ) -> list[ChildResult] | None:
        """:func:`awooop.runs.children.start_wait` in a tenant transaction: the outcomes when
        enough children have finished (journaled), else None (the run waits)."""
        attempt = self._attempt
        with unavailable_on_store_errors("the wait could not be written"):
            found: list[ChildResult] | None = await self._db.in_tenant(
                attempt.project_id,
                lambda conn: children.start_wait(
                    conn,
                    attempt.run_id,
                    attempt.worker_id,
                    attempt.number,
                    step=step,
                    children=ids,
                    needed=needed,
                    time_out=time_out,
                    due_at=due_at,
                    metadata=trace_metadata(),
                ),
                timeout_s=self._io_timeout_s,
            )
        return found


def filled_or_gone(
    journaled: Any, stored: Mapping[uuid.UUID, Any], gone: str = "is no longer stored"
) -> list[ChildResult]:
    """:func:`awooop.eventlog.child_state.filled`; RuntimeError naming a child whose result
    ``stored`` lacks (``gone``: why)."""
    try:
        return filled(journaled, stored)
    except KeyError as missing:
        raise RuntimeError(f"the result of child run {missing.args[0]} {gone}") from None


def _handles(handles: Sequence[ChildHandle]) -> list[ChildHandle]:
    if isinstance(handles, ChildHandle) or not handles:
        raise InvalidInputError("wait_for_children takes a non-empty list of child handles")
    try:
        return [h if isinstance(h, ChildHandle) else msgspec.convert(h, ChildHandle)
                for h in handles]  # fmt: skip
    except (msgspec.ValidationError, TypeError) as exc:
        raise InvalidInputError(f"wait_for_children: not a child handle: {exc}") from None


class ChildRunsMixin:
    """The methods :class:`awooop.worker.context.RunContext` offers for child runs."""

    _children: ChildRuns

    async def start_child(
        self, contract: str, input: Any, *, key: str, cancel_with_parent: bool = True
    ) -> ChildHandle:
        """Start a child run of ``contract`` with ``input``, named ``key`` among this run's
        children (module doc); ``cancel_with_parent``: cancelling this run cancels it."""
        return await self._children.start(contract, input, key, cancel_with_parent)

    async def wait_for_children(
        self,
        handles: Sequence[ChildHandle],
        *,
        count: int | None = None,
        timeout: timedelta | None = None,  # noqa: ASYNC109 - the durable wait's, journaled
        name: str | None = None,
    ) -> list[ChildResult]:
        """Wait until every child of ``handles`` (or the first ``count``) has finished; their
        outcomes in the order of ``handles``. E-CHILD-001 after ``timeout``."""
        return await self._children.wait(handles, count, timeout, name)
