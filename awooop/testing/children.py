"""Child runs in the handler kit, in memory (docs/workers.md, Testing handlers).

``run.start_child(contract, input, key=...)`` makes a run of its own, driven by a copy of the
parent's :class:`~awooop.testing.HandlerKit` (the same clock, model, tools and scripted
approvals) with the handler the kit names for that contract (``children={contract:
handler}``), else the parent's own handler (one handler that routes by contract, as a worker
serving several contracts does). The child's run id comes from the parent's and the key, so
a key names one child, and the parent's journal gets the handle under ``child:<key>`` as the
runtime writes it; more than ``children_pending_max`` unfinished children are refused
(E-CHILD-002) and nothing is written.

A child is driven as soon as it is started (``start_children=True``, the default): it runs
until it completes, fails or waits (for an approval, a signal, a sleep or its own children).
With ``start_children=False`` it stays PENDING until the test drives it
(``await kit.children["key"].resume()``), so a test can see its parent wait.

``run.wait_for_children`` reads the children's states as the runtime reads their committed
rows: enough finished and their outcomes are journaled as a step; else the parent waits
(``WaitStarted`` kind "children"), and the next :meth:`HandlerKit.resume` of the parent, once
enough of them have finished, writes ``ChildrenFinished`` (RESUMED) and runs it again.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Generic, Protocol, TypeVar

import msgspec

from awooop.core.config import Settings
from awooop.core.errors import ChildKeyTakenError, ChildLimitError, InvalidInputError
from awooop.core.events import ChildrenFinished, RunCreated, StepCompleted, WaitStarted
from awooop.eventlog import child_state
from awooop.eventlog.child_state import CHILD_STEP_PREFIX, ChildHandle, ChildResult
from awooop.eventlog.state import RunState, RunStatus
from awooop.eventlog.wait_state import CHILDREN
from awooop.runs import leases
from awooop.testing.fakes import Clock
from awooop.worker.attempts import Attempt
from awooop.worker.child_runs import ChildRuns, filled_or_gone

Handler = Callable[[Any], Awaitable[object]]
NOT_RUN_HERE = (
    "was left in its row by the journal, and this kit did not run that child (the children of "
    "a replayed journal are not run again): replay it on the awooop_postgres fixture"
)


class Kit(Protocol):
    """What a child run needs of the kit that runs it (:class:`~awooop.testing.HandlerKit`)."""

    handler: Handler
    child_handlers: dict[str, Handler]
    clock: Clock
    max_attempts: int
    children_pending_max: int

    @property
    def state(self) -> RunState: ...
    def begin(self, created: RunCreated) -> None: ...
    async def resume(self, handler: Handler | None = None) -> Any: ...
    def due(self, now: datetime) -> None: ...


K = TypeVar("K", bound=Kit)


class KitChildren(Mapping[str, K], Generic[K]):
    """The child runs of one kit run, by key: each a :class:`HandlerKit` of its own."""

    def __init__(self, parent: K) -> None:
        self._parent = parent
        self._kits: dict[str, K] = {}

    def __getitem__(self, key: str) -> K:
        return self._kits[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._kits)

    def __len__(self) -> int:
        return len(self._kits)

    def create(
        self, parent: RunState, contract: str, value: Any, key: str, cancel_with_parent: bool
    ) -> tuple[ChildHandle, K]:
        """The child ``key`` of ``parent`` (PENDING, not yet driven), or the one the key names
        already; refused over the parent's bound on unfinished children."""
        run_id = uuid.uuid5(parent.run_id, key)
        kit = self._kits.get(key)
        if kit is not None:
            if kit.state.parent_run_id != parent.run_id:  # pragma: no cover - a key is ours
                raise ChildKeyTakenError(run_id=parent.run_id, key=key, taken_by=run_id)
            return ChildHandle(run_id=run_id, key=key, contract=contract), kit
        pending = sum(1 for k in self._kits.values() if k.state.status not in _FINISHED)
        if pending >= self._parent.children_pending_max:
            raise ChildLimitError(run_id=parent.run_id, pending=pending)
        kit = copy.copy(self._parent)
        kit.handler = self._parent.child_handlers.get(contract, self._parent.handler)
        kit.begin(
            RunCreated(
                at=self._parent.clock.now(),
                run_id=run_id,
                project_id=parent.project_id,
                channel_type=child_state.CHILD_CHANNEL,
                provider_event_id=child_state.dedupe_key(parent.run_id, key),
                input=value,
                max_attempts=self._parent.max_attempts,
                contract_id=contract,
                parent_run_id=parent.run_id,
                cancel_with_parent=cancel_with_parent,
            )
        )
        self._kits[key] = kit
        return ChildHandle(run_id=run_id, key=key, contract=contract), kit

    def forget(self, key: str) -> None:
        """Undo :meth:`create` when the parent's journal entry was refused (as a rollback)."""
        self._kits.pop(key, None)

    def outcomes(self, parent_run_id: uuid.UUID, ids: Sequence[uuid.UUID]) -> list[ChildResult]:
        """Each child's outcome now, in the order of ``ids`` (E-INPUT-001 for a run that is
        not a child of this kit run, as the runtime refuses it)."""
        rows = {k.state.run_id: _row(k.state) for k in self._kits.values()}
        missing = [i for i in ids if i not in rows]
        if missing:
            raise InvalidInputError(
                f"run {missing[0]} is not a child of this run (a child run this kit did not "
                "start: the children of a replayed journal are not run again)",
                run_id=parent_run_id,
            )
        return child_state.outcomes(ids, [rows[i] for i in ids])

    def finished(self, wait: WaitStarted | None, now: datetime) -> ChildrenFinished | None:
        """The ``ChildrenFinished`` that ends ``wait`` (a wait for children) once enough of
        them have finished, as the last child's write does on Postgres."""
        if wait is None or wait.kind != CHILDREN or wait.needed is None:
            return None
        if not all(any(k.state.run_id == i for k in self._kits.values()) for i in wait.children):
            return None
        found = self.outcomes(self._parent.state.run_id, wait.children)
        statuses = [r.status for r in found]
        if not child_state.satisfied(statuses, wait.needed):
            return None
        return ChildrenFinished(
            at=now,
            step=wait.step,
            results=child_state.encoded(found),
            finished=child_state.finished_count(statuses),
        )

    def due(self, now: datetime) -> None:
        """What the timers and expiry loops end at ``now`` in every child (and theirs)."""
        for kit in self._kits.values():
            kit.due(now)


_FINISHED = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})


def _row(state: RunState) -> dict[str, Any]:
    """A child's state as :func:`awooop.eventlog.child_state.outcome_of` reads its row."""
    return {
        "run_id": state.run_id,
        "provider_event_id": state.provider_event_id,
        "parent_run_id": state.parent_run_id,
        "status": state.status.value,
        "result": state.result,
        "failure_code": state.failure_code,
        "failure_reason": state.failure_reason,
    }


class ChildrenDriver(Protocol):
    """What :class:`MemoryChildRuns` needs of its kit."""

    children_pending_max: int
    start_children: bool
    handler: Handler

    @property
    def state(self) -> RunState: ...
    @property
    def children(self) -> KitChildren[Any]: ...
    def now(self) -> datetime: ...
    async def write(self, write: leases.FencedWrite) -> RunState: ...


class MemoryChildRuns(ChildRuns):
    """The runtime's child runs of one attempt, their I/O on the kit (module doc)."""

    def __init__(
        self,
        kit: ChildrenDriver,
        attempt: Attempt,
        steps: Mapping[str, Any],
        use: Callable[[str], None],
    ) -> None:
        db: Any = None  # never used: every write below goes to the kit
        settings = msgspec.structs.replace(
            Settings(), children_pending_max=kit.children_pending_max
        )
        super().__init__(
            db=db, attempt=attempt, steps=steps, use=use, io_timeout_s=None, settings=settings
        )
        self._kit = kit

    def _now(self) -> datetime:
        return self._kit.now()

    async def _created(
        self, contract: str, value: Any, key: str, cancel_with_parent: bool
    ) -> ChildHandle:
        kit, a = self._kit, self._attempt
        handle, child = kit.children.create(kit.state, contract, value, key, cancel_with_parent)
        result = msgspec.to_builtins(handle)

        def entry(_state: Any, at: datetime) -> StepCompleted:
            return StepCompleted(
                at=at,
                worker_id=a.worker_id,
                attempt=a.number,
                step=CHILD_STEP_PREFIX + key,
                result=result,
            )

        try:
            await kit.write(leases.FencedWrite(a.run_id, a.worker_id, a.number, entry))
        except BaseException:
            kit.children.forget(key)
            raise
        if kit.start_children:
            await child.resume()
        return handle

    async def _filled(self, journaled: Any) -> list[ChildResult]:
        stored = {k.state.run_id: k.state.result for k in self._kit.children.values()}
        return filled_or_gone(journaled, stored, NOT_RUN_HERE)

    async def _start_wait(
        self,
        step: str,
        ids: list[uuid.UUID],
        needed: int,
        time_out: timedelta | None,
        due_at: datetime | None,
    ) -> list[ChildResult] | None:
        kit, a = self._kit, self._attempt
        found = kit.children.outcomes(a.run_id, ids)
        if child_state.satisfied([r.status for r in found], needed):
            results = child_state.encoded(found)

            def done(_state: Any, at: datetime) -> StepCompleted:
                return StepCompleted(
                    at=at, worker_id=a.worker_id, attempt=a.number, step=step, result=results
                )

            await kit.write(leases.FencedWrite(a.run_id, a.worker_id, a.number, done))
            return found

        def started(_state: Any, at: datetime) -> WaitStarted:
            return WaitStarted(
                at=at,
                worker_id=a.worker_id,
                attempt=a.number,
                step=step,
                kind=CHILDREN,
                children=tuple(ids),
                needed=needed,
                due_at=due_at or (None if time_out is None else at + time_out),
            )

        await kit.write(leases.FencedWrite(a.run_id, a.worker_id, a.number, started))
        return None
