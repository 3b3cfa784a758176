"""The run context a :class:`~awooop.testing.HandlerKit` gives a handler: the real
:class:`~awooop.worker.context.RunContext` (its journaling and replay of steps, its model call
records, its tool waits), with only its I/O replaced: fenced writes go to the kit's in-memory
journal, a tool wait's answers are written there instead of being re-admitted under a
concurrency key in Postgres, an approval is looked up in and requested from the kit, and a
durable wait (sleep, event) runs on the kit's clock and signals (:mod:`awooop.testing.waits`),
and a child run is a kit run of its own (:mod:`awooop.testing.children`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NoReturn, Protocol, TypeVar

from awooop.eventlog.state import RunState
from awooop.eventlog.wait_state import ended
from awooop.llm.gateway import DEFAULT_CONTRACT, LLMResult
from awooop.runs import leases
from awooop.runs.approvals import ApprovalTicket, DecisionRecord
from awooop.testing.children import ChildrenDriver, MemoryChildRuns
from awooop.testing.fakes import FakeModel, FakeTools
from awooop.testing.output import KitOutput
from awooop.testing.waits import MemoryDurableWaits, WaitsDriver
from awooop.worker import approval_grants, approval_waits
from awooop.worker.attempts import Attempt
from awooop.worker.context import APPROVAL_STEP_PREFIX, ApprovalGrant, RunContext
from awooop.worker.contract_retry import ContractRetry, Overrides
from awooop.worker.tool_waits import TOOL_STEP_PREFIX, ToolWaits, answer_events

T = TypeVar("T")


class Driver(WaitsDriver, ChildrenDriver, Protocol):
    """What the context needs of its :class:`~awooop.testing.HandlerKit`."""

    model: FakeModel
    tools: FakeTools
    approval_ttl_s: float
    step_result_max_bytes: int
    contract_retry: Overrides

    @property
    def output(self) -> KitOutput: ...

    async def write(self, write: leases.FencedWrite) -> RunState: ...
    def asked(self, step: str, replayed: bool) -> None: ...
    def decision(self, name: str) -> DecisionRecord | None: ...
    async def request_approval(
        self, ctx: KitContext, name: str, reason: str, ask: approval_grants.Ask
    ) -> ApprovalTicket: ...


class NoDatabase:
    """Stands for the database the kit does not have: any use names what needed it."""

    def __getattr__(self, name: str) -> NoReturn:
        raise RuntimeError(
            f"the handler kit has no database (Database.{name} was asked for): "
            "use the awooop_postgres fixture (awooop.testing.pytest_plugin) for that"
        )


@dataclass(eq=False)
class KitAttempt(Attempt):
    """An attempt whose step start times come from the kit's clock."""

    now: Callable[[], datetime] | None = None

    def enter_step(self, name: str) -> tuple[str | None, datetime | None]:
        outer = (self.step, self.step_started_at)
        assert self.now is not None
        self.step, self.step_started_at = name, self.now()
        return outer


class MemoryToolWaits(ToolWaits):
    """The real tool waits (held answers, parallel calls as one wait of the run), whose last
    answer writes every held answer to the journal: there is no concurrency key to be
    re-admitted under in memory."""

    async def _continue(self) -> bool:
        held = list(self._held)
        try:
            for make in answer_events(held, self._worker_id, self._attempt):
                await self._write(make)
        except Exception as exc:  # every held call gets the error, as in the real one
            del self._held[: len(held)]
            for a in held:
                a.written.set_exception(exc)
            return True
        del self._held[: len(held)]
        for a in held:
            a.written.set_result(None)
        return True


class KitContext(RunContext):
    """:class:`RunContext` driven by a :class:`~awooop.testing.HandlerKit`."""

    _tool_waits = MemoryToolWaits

    def __init__(self, kit: Driver, attempt: KitAttempt, state: RunState) -> None:
        db: Any = NoDatabase()
        super().__init__(
            attempt=attempt,
            state=state,
            db=db,
            writer=kit.write,
            llm=kit.model,
            notifier=None,
            approval_ttl_s=kit.approval_ttl_s,
            step_result_max_bytes=kit.step_result_max_bytes,
            overrides=ContractRetry.fixed(kit.contract_retry),
            output=kit.output.sink(attempt.number),
        )
        self._kit = kit
        steps = state.saga_steps

        def use(step: str) -> None:  # a wait's step: replayed when the journal ended it
            self._use(step)
            entry = steps.get(step)
            kit.asked(step, isinstance(entry, dict) and ended(entry) is not None)

        self._waits = MemoryDurableWaits(kit, attempt, steps, use)
        self._children = MemoryChildRuns(kit, attempt, steps, use)

    # ``how``: whatever else the runtime's own takes (passed on as it is).
    async def step(
        self,
        name: str,
        fn: Callable[[], Awaitable[T]],
        *,
        type: type[T] | None = None,
        **how: Any,
    ) -> T:
        self._kit.asked(name, name in self._steps)
        return await super().step(name, fn, type=type, **how)

    async def wait_for_tool(
        self,
        tool: str,
        call: Callable[[], Awaitable[T]],
        *,
        type: type[T] | None = None,
        **how: Any,
    ) -> T:
        step_name = TOOL_STEP_PREFIX + tool
        self._kit.asked(step_name, step_name in self._steps)
        wrapped = self._kit.tools.wrap(tool, self.attempt, call)
        return await super().wait_for_tool(tool, wrapped, type=type, **how)

    async def wait_for_approval(self, name: str = "approval", **how: Any) -> ApprovalGrant:
        step_name = APPROVAL_STEP_PREFIX + name
        self._kit.asked(step_name, step_name in self._steps)
        return await super().wait_for_approval(name, **how)

    async def _decide_or_ask(
        self, name: str, reason: str, ask: approval_grants.Ask
    ) -> ApprovalGrant | ApprovalTicket:
        """What the runtime's does in its transaction, on the kit's approvals instead."""
        found = self._kit.decision(name)
        if found is not None and approval_grants.answers(found):
            grant = approval_grants.recorded(found)
            await self._write(approval_waits.granted(self.worker_id, self.attempt, name, grant))
            return approval_grants.replayed(name, grant)
        self._attempt.finishing = True
        return await self._kit.request_approval(self, name, reason, ask)

    async def llm_step(
        self,
        name: str,
        prompt: str,
        *,
        contract: tuple[str, str] = DEFAULT_CONTRACT,
        **options: Any,
    ) -> LLMResult:
        self._kit.asked(name, name in self._steps)
        return await super().llm_step(name, prompt, contract=contract, **options)
