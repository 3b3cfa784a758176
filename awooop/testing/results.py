"""What a :class:`~awooop.testing.HandlerKit` answers: where the run stands
(:class:`KitResult`) and what a replay against new code did (:class:`ReplayReport`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from awooop.core.events import ModelCalled, RunFailed
from awooop.eventlog.state import RunState, RunStatus
from awooop.runs.approvals import ApprovalTicket
from awooop.testing.journal import Journal
from awooop.testing.output import KitOutput


@dataclass
class KitResult:
    """Where a run stands after :meth:`HandlerKit.run`, :meth:`~HandlerKit.resume` or
    :meth:`~HandlerKit.replay`: COMPLETED, FAILED, WAITING_APPROVAL (``ticket``) or
    WAITING_EVENT (asleep, or waiting for a signal: ``waiting_for``)."""

    journal: Journal
    error: BaseException | None = None  # the handler's exception, when it failed the run
    ticket: ApprovalTicket | None = None  # the approval it waits for
    output: KitOutput = field(default_factory=KitOutput)  # what it emitted (run.emit_output)

    @property
    def state(self) -> RunState:
        return self.journal.state

    @property
    def status(self) -> RunStatus:
        return self.state.status

    @property
    def value(self) -> Any:
        """The run's result (JSON, as stored); raises the handler's error when it failed."""
        if self.error is not None:
            raise self.error
        if self.status is not RunStatus.COMPLETED:
            raise AssertionError(f"the run is {self.status}: {self.state.failure_reason or ''}")
        return self.state.result

    @property
    def waiting_for(self) -> str | None:
        """While WAITING_EVENT: ``sleep`` or ``event <name>``."""
        return self.state.waiting_for

    @property
    def failure_code(self) -> str | None:
        return self.state.failure_code

    @property
    def failure_reason(self) -> str | None:
        return self.state.failure_reason

    @property
    def failed_step(self) -> str | None:
        """The step the handler was in when its exception failed the run (``RunFailed.step``)."""
        failed = self.journal.of_type(RunFailed)
        return failed[-1].step if failed else None

    @property
    def attempts(self) -> int:
        return self.state.attempt_count


@dataclass
class ReplayReport:
    """What replaying a recorded journal against new handler code did: the journaled steps it
    got back without running them (``replayed``), the steps it ran (``ran``: new, or renamed:
    a renamed step is a new step), and the journaled steps it never asked for (``unused``:
    removed or renamed; their results stay in the journal and nothing runs for them)."""

    result: KitResult
    replayed: list[str]
    ran: list[str]
    unused: list[str]
    model_calls: list[ModelCalled]  # the calls the new code made (not journaled answers)
