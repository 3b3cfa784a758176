"""Testing handlers without the servers (docs/workers.md, "Testing handlers").

:class:`HandlerKit` runs a handler in-process, through the real
:class:`~awooop.worker.context.RunContext`: steps are journaled and replayed by its own code,
model calls recorded as ``ModelCalled`` (a ``run.llm_step``'s with its step, in one write;
replayed from the journal without a call), tool waits held and written as
``ToolResultReceived`` and ``tool:<name>`` steps, approvals requested and journaled as
``approval:<name>`` steps. Only the I/O is replaced: every fenced write goes to an in-memory
journal, folded by the real state machine (:func:`awooop.eventlog.state.apply`), so an event
the runtime would refuse is refused here too. The model, the tools and the clock are fakes the
test controls:

- :class:`FakeModel`: scripted answers, by call order or by a matcher on the prompt, and the
  calls it got;
- :class:`FakeTools`: answers to ``run.wait_for_tool`` (scripted, a function, or given by the
  test while the run waits), bounded by a timeout;
- :class:`Approve` / :class:`Reject`: scripted decisions, or :meth:`HandlerKit.approve` /
  :meth:`~HandlerKit.reject` then :meth:`~HandlerKit.resume`;
- :class:`Clock`: the time of every event, of approval expiry and of durable waits
  (:meth:`HandlerKit.advance` fires a sleep or an event wait's timeout once it is due);
- signals: :meth:`HandlerKit.signal` sends one to the run (kept before its wait, delivered
  during it, once per key: :mod:`awooop.testing.waits`);
- :class:`Journal`: the run's events, with views (steps, model calls, tool calls, approvals)
  and JSON to keep one; :meth:`HandlerKit.replay` runs a recorded journal against new code;
- child runs: each a kit run of its own with its contract's handler (``kit.children``:
  :mod:`awooop.testing.children`);
- :class:`KitOutput`: what the handler emitted with ``run.emit_output``, by attempt
  (``result.output.text``, ``result.output.of_attempt(2)``, ``result.output.truncated``).

For a test that wants the real database, :mod:`awooop.testing.pytest_plugin` has the
``awooop_postgres`` fixture: a handler run by an in-process worker on a fresh migrated
database, through the worker's polling path (no Redis).
"""

from awooop.testing.approvals import Approve, Reject
from awooop.testing.fakes import Clock, FakeModel, FakeTools, ModelCallRecord, ToolCall
from awooop.testing.journal import Journal
from awooop.testing.kit import HandlerKit
from awooop.testing.output import KitOutput
from awooop.testing.results import KitResult, ReplayReport

__all__ = [
    "Approve",
    "Clock",
    "FakeModel",
    "FakeTools",
    "HandlerKit",
    "Journal",
    "KitOutput",
    "KitResult",
    "ModelCallRecord",
    "Reject",
    "ReplayReport",
    "ToolCall",
]
