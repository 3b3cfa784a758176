"""Errors of the event log, runs, approvals and the worker runtime."""

from __future__ import annotations

from awooop.core.error_catalog.base import AwoooPError

# --- event log ------------------------------------------------------------------------------


class VersionConflictError(AwoooPError):
    """The event stream is not at the expected version (a concurrent writer appended first)."""

    code = "E-EVENT-001"
    http_status = 409


class StreamOrderConflictError(AwoooPError):
    """This transaction started before the stream's last writer committed; retry it."""

    code = "E-EVENT-002"
    http_status = 409
    retryable = True


class UnknownEventTypeError(AwoooPError):
    """The event type is not known to this version of the runtime."""

    code = "E-EVENT-003"


class StreamNotOfProjectError(AwoooPError):
    """The stream name is not one of this project's: run-<run id>, domain/<project>/<name> or
    revision-<project>/<family>/<contract> (migrations/0115_stream_names.sql). Nothing was
    written."""

    code = "E-EVENT-004"
    http_status = 403


# --- runs -----------------------------------------------------------------------------------


class IllegalTransitionError(AwoooPError):
    """This event is not allowed in the run's current state."""

    code = "E-RUN-001"
    http_status = 409


class LeaseLostError(AwoooPError):
    """The attempt no longer holds the run's lease; the write was fenced off."""

    code = "E-RUN-002"
    http_status = 409


class RunNotFoundError(AwoooPError):
    """No such run."""

    code = "E-RUN-003"
    http_status = 404


class OperationNotFoundError(AwoooPError):
    """No such operation."""

    code = "E-OPERATION-001"
    http_status = 404


class PauseNotFoundError(AwoooPError):
    """No active pause of that scope (project, channel or contract) to resume."""

    code = "E-PAUSE-001"
    http_status = 404


class ConcurrencyDepthError(AwoooPError):
    """The concurrency key of a submission already has as many runs queued as its limit's depth
    cap allows: nothing was written; submit again later."""

    code = "E-CONCURRENCY-001"
    http_status = 429
    retry_after_s = 5


class ConcurrencyLimitNotFoundError(AwoooPError):
    """No concurrency limit on that channel or contract."""

    code = "E-CONCURRENCY-002"
    http_status = 404


class OverBudgetError(AwoooPError):
    """The model call would take the project's token budget for the period past its limit, and
    the budget says fail (``on_exceed`` fail); nothing was called."""

    code = "E-BUDGET-001"
    http_status = 429


class FlowWaitTooLongError(AwoooPError):
    """A model call waited for a rate-limit token or a budget longer than
    AWOOOP_LLM_FLOW_MAX_WAIT_S allows; nothing was called."""

    code = "E-BUDGET-002"
    http_status = 429
    retryable = True


class LimitNotFoundError(AwoooPError):
    """No rate limit, budget or price of that scope is in force."""

    code = "E-BUDGET-003"
    http_status = 404


class PriceNotFoundError(AwoooPError):
    """A budget in cost counts calls to a model that has no price (``awooop projects price
    set``): setting such a budget writes nothing, and such a call is not made (nothing is
    reserved or charged)."""

    code = "E-BUDGET-004"
    http_status = 409


# --- approvals ------------------------------------------------------------------------------


class ApprovalTokenInvalidError(AwoooPError):
    """The approval token is not valid for this run."""

    code = "E-APPROVAL-001"
    http_status = 403


class ApprovalExpiredError(AwoooPError):
    """The approval token expired before a decision was made."""

    code = "E-APPROVAL-002"
    http_status = 410


class ApprovalTokenUsedError(AwoooPError):
    """The approval token was already used."""

    code = "E-APPROVAL-003"
    http_status = 409


# --- workers, leases and approvals (worker runtime) ------------------------------------------


class MaxAttemptsExceededError(AwoooPError):
    """Max retry attempts exceeded"""

    code = "E-RUN-004"
    http_status = 409


class DeliveryLimitError(AwoooPError):
    """The run's work message was delivered too often; the run was dead-lettered."""

    code = "E-RUN-005"
    http_status = 409


class ApprovalRejectedError(AwoooPError):
    """The approval was rejected."""

    code = "E-APPROVAL-004"
    http_status = 409


class HandlerError(AwoooPError):
    """The run handler raised an exception."""

    code = "E-HANDLER-001"
    http_status = 500


class HandlerNotFoundError(AwoooPError):
    """The handler must name an async function as package.module:function."""

    code = "E-HANDLER-002"


class DuplicateStepError(AwoooPError):
    """A step name may be used once per run; this one was used twice."""

    code = "E-HANDLER-003"

    def __init__(self, message: str | None = None, **details: object) -> None:
        step = details.get("step")
        if message is None and step is not None:
            message = (
                f"step {step!r} was used twice in this attempt: a step name may be used once"
                " per run (give each call of run.step or run.wait_for_* its own name)"
            )
        super().__init__(message, **details)


class StepResultTypeError(AwoooPError):
    """A step's result does not fit the type the handler asked for (``type=``): the value the
    step returned, or the result an earlier attempt recorded. The message names the step and
    the field; nothing was recorded."""

    code = "E-HANDLER-004"


class StepTimeoutError(AwoooPError):
    """A step did not finish within its timeout (``run.step(..., timeout=...)``)."""

    code = "E-HANDLER-005"
    http_status = 504
    retryable = True


class ToolTimeoutError(AwoooPError):
    """A tool call did not answer within its timeout (``run.wait_for_tool(..., timeout=...)``)."""

    code = "E-TOOL-001"
    http_status = 504
    retryable = True


class HandlerVersionError(AwoooPError):
    """A handler version is 1 to 64 characters: letters, digits and ``. _ - + :``, starting
    with a letter or a digit (``v2``, ``1.4.0``, ``git:3f2a9c1``); nothing was written."""

    code = "E-VERSION-001"
    http_status = 400


class VersionRequirementNotFoundError(AwoooPError):
    """That contract of the project requires no handler version."""

    code = "E-VERSION-002"
    http_status = 404


class OutputStreamsExceededError(AwoooPError):
    """This project already reads as many streams of run output as it may on this server
    (AWOOOP_OUTPUT_STREAMS_PER_PROJECT): close one, or read with ?format=json."""

    code = "E-OUTPUT-001"
    http_status = 429
    retryable = True
    retry_after_s = 5


class ServerOutputStreamsExceededError(AwoooPError):
    """This server already serves as many streams of run output as it may
    (AWOOOP_OUTPUT_STREAMS): try again in a moment, or read with ?format=json."""

    code = "E-OUTPUT-002"
    http_status = 429
    retryable = True
    retry_after_s = 5


# --- durable waits and signals (docs/workers.md) ---------------------------------------------


class EventWaitTimeoutError(AwoooPError):
    """No signal answered the wait for the event before its timeout
    (``run.wait_for_event(..., timeout=...)``)."""

    code = "E-SIGNAL-001"
    http_status = 504


class SignalRunFinishedError(AwoooPError):
    """The run has finished: it takes no more signals. Nothing was written."""

    code = "E-SIGNAL-002"
    http_status = 409


class SignalLimitError(AwoooPError):
    """The run already keeps as many undelivered signals as a run may
    (AWOOOP_SIGNALS_PER_RUN_MAX). Nothing was written."""

    code = "E-SIGNAL-003"
    http_status = 429
    retry_after_s = 60


# --- child runs (docs/workers.md, Child runs) ------------------------------------------------


class ChildrenWaitTimeoutError(AwoooPError):
    """Not enough of the child runs waited for finished before the wait's timeout
    (``run.wait_for_children(..., timeout=...)``)."""

    code = "E-CHILD-001"
    http_status = 504


class ChildLimitError(AwoooPError):
    """The run already has as many unfinished child runs as a run may
    (AWOOOP_CHILDREN_PENDING_MAX). Nothing was written."""

    code = "E-CHILD-002"
    http_status = 429
    retry_after_s = 60


class ChildKeyTakenError(AwoooPError):
    """The child key's run (its dedupe key, derived from this run and the key) is a run that is
    not a child of this run. Nothing was written."""

    code = "E-CHILD-003"
    http_status = 409
