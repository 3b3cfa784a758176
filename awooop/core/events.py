"""Domain events: msgspec tagged-union Structs, one decoder built once.

Schema evolution rules (stored events are never rewritten):
- a new field gets a default, so that older stored events still decode;
- a field's annotation never changes; a field is never renamed (add a new one instead);
- an event type is never removed or renamed while stored events of that type may exist;
- a new event type is decoded only by code that knows it (a projector refuses an undeclared
  type rather than skip it): upgrade the readers of the log (projectors, replay) before the
  processes that write the new type.
``tests/unit/test_events.py`` decodes stored examples of every type to hold us to this.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from typing import Any

import msgspec

from awooop.core.child_events import ChildrenFinished as ChildrenFinished
from awooop.core.errors import UnknownEventTypeError
from awooop.core.event_base import JSON as JSON
from awooop.core.event_base import EventBase as EventBase
from awooop.core.wait_events import SignalDelivered as SignalDelivered
from awooop.core.wait_events import TimerFired as TimerFired
from awooop.core.wait_events import WaitStarted as WaitStarted

# --- run events (stream "run-<run_id>") ------------------------------------------------------


class RunCreated(EventBase, frozen=True, kw_only=True, tag=True):
    run_id: uuid.UUID
    project_id: str
    channel_type: str
    provider_event_id: str
    input: JSON
    max_attempts: int
    contract_id: str | None = None
    # The run's concurrency key as intake computed it from its contract's or channel's limit
    # (awooop.runs.concurrency_rules): the limit's scope, the key and the key's maximum.
    concurrency_scope: str | None = None
    concurrency_key: str | None = None
    concurrency_max: int | None = None
    # A child run (docs/workers.md, Child runs): the run that started it, and whether
    # cancelling that run cancels this one while it is unfinished.
    parent_run_id: uuid.UUID | None = None
    cancel_with_parent: bool = False


class RunClaimed(EventBase, frozen=True, kw_only=True, tag=True):
    worker_id: str
    attempt: int
    lease_until: datetime
    # The code version of the handler the worker runs (awooop.worker.handler_version): what ran
    # this attempt. None in events stored before the field existed, and in claims of the
    # platform's own (the reaper claims nothing).
    handler_version: str | None = None


class StepCompleted(EventBase, frozen=True, kw_only=True, tag=True):
    """A step of ``run.step`` (or a tool's ``tool:<name>``, an approval's ``approval:<name>``)
    journaled with its result. ``at`` is when it was written (the database clock),
    ``started_at`` when its function started (the worker's clock; None for an approval's
    step, and in events stored before the field existed)."""

    worker_id: str
    attempt: int
    step: str
    result: JSON = None
    started_at: datetime | None = None
    # Its tries under its retry policy (awooop.worker.policies): how many, and each failed
    # try's error (``code: message``, capped); 1 and empty in events stored before.
    tries: int = 1
    try_errors: tuple[str, ...] = ()


class ToolWaitStarted(EventBase, frozen=True, kw_only=True, tag=True):
    """A tool call of the attempt started (``run.wait_for_tool``): the run is WAITING_TOOL
    (written again, with the run already WAITING_TOOL, for each call made beside it)."""

    worker_id: str
    attempt: int
    tool: str


class ToolResultReceived(EventBase, frozen=True, kw_only=True, tag=True):
    """A tool call's answer, written when the attempt continues (its run re-admitted under
    its concurrency key in the same transaction). ``others``: how many of the attempt's tool
    answers are written after this one in that transaction (parallel calls); the last one
    (``others`` 0, and every event stored before the field existed) makes the run RUNNING."""

    worker_id: str
    attempt: int
    tool: str
    result: JSON = None
    others: int = 0


class ModelCalled(EventBase, frozen=True, kw_only=True, tag=True):
    """A model call that an attempt made through ``run.llm`` (:mod:`awooop.llm.calls`),
    written fenced once the call returned or failed; the run's state only moves its version.

    ``at`` is when the record was written (the database clock); ``started_at`` when the call
    started and ``duration_ms`` how long it took through the gateway, pointer check included
    (the worker's clock). ``contract_family``/``contract_id`` name the policy contract asked
    for; ``model``, ``revision_id`` and ``body_hash`` what served it (``revision_id`` and
    ``body_hash`` None: the default policy; ``model`` None: the call failed before it was
    routed). ``outcome`` is ``ok`` or the error's code (E-LLM-001 ...), ``reason`` the error in
    words. ``prompt`` and ``answer`` are the call's, each capped (:mod:`awooop.llm.calls`:
    a long prompt keeps its head and a marker); ``input_tokens``/``output_tokens`` what the
    model client reported (None: it reported none, or the call failed, and in events stored
    before these fields existed, which hold no prompt or answer either). ``try_number`` and
    ``next_try_in_s``: which try of the call this was, and the wait before the next one."""

    worker_id: str
    attempt: int
    contract_family: str
    contract_id: str
    model: str | None
    revision_id: uuid.UUID | None
    body_hash: str | None
    started_at: datetime
    duration_ms: float
    outcome: str
    reason: str = ""
    prompt: str = ""
    answer: str = ""
    input_tokens: int | None = None
    output_tokens: int | None = None
    # The call's try under its retry policy (awooop.worker.policies) and, when it failed and
    # another try follows, the wait before it in seconds (None: no try follows).
    try_number: int = 1
    next_try_in_s: float | None = None


class ApprovalRequested(EventBase, frozen=True, kw_only=True, tag=True):
    worker_id: str
    attempt: int
    expires_at: datetime
    reason: str = ""
    # The draft shown to the reviewer; what a rejection and an expiry do ("fail": the run
    # fails, "return": it resumes and the handler gets the decision); the request's own expiry
    # in seconds (None: the worker's AWOOOP_APPROVAL_TTL_S made expires_at).
    payload: JSON = None
    on_reject: str = "fail"
    on_expire: str = "fail"
    expires_in_s: float | None = None


class ApprovalGranted(EventBase, frozen=True, kw_only=True, tag=True):
    """``actor``: who decided (the person the approval token's bearer named, or the token of
    a decision without it); ``by``: the person, for a decision without the approval token."""

    actor: str
    by: str | None = None
    reason: str = ""  # the reviewer's reason
    payload: JSON = None  # the payload as the reviewer edited it (None: not edited)


class ApprovalRejected(EventBase, frozen=True, kw_only=True, tag=True):
    """``resumed``: the request said "return": the run resumes and the handler gets the
    rejection (else the run fails, E-APPROVAL-004)."""

    actor: str
    reason: str = ""
    by: str | None = None
    payload: JSON = None
    resumed: bool = False


class ApprovalExpired(EventBase, frozen=True, kw_only=True, tag=True):
    """``resumed``: the request said "return": the run resumes and the handler gets the
    expiry (else the run fails, E-APPROVAL-002)."""

    resumed: bool = False


class RunCompleted(EventBase, frozen=True, kw_only=True, tag=True):
    worker_id: str
    attempt: int
    result: JSON = None


class RunFailed(EventBase, frozen=True, kw_only=True, tag=True):
    """A run failed: by its worker (worker_id and attempt set), by the platform (a dead letter,
    an operator: both None), or by the platform when the lease of the last attempt expired
    (the reaper, or a worker taking the run: worker_id and attempt name that expired attempt,
    ``last_renewal_at`` is when its lease was last taken or renewed).

    ``dead_letter``: the run is dead-lettered: its dead letter is a row of
    ``awooop_dead_letters`` written in the transaction that appends this event
    (:mod:`awooop.eventlog.deadletters`).

    A handler's exception: ``traceback`` is its traceback (frames, no local variables, secrets
    redacted, capped: :func:`awooop.core.excerpts.failure_traceback`), ``step`` the step the
    handler was in when it raised (None: outside every step). Empty and None for a failure
    that is not a handler's exception, and in events stored before the fields existed."""

    reason: str
    code: str
    worker_id: str | None = None
    attempt: int | None = None
    last_renewal_at: datetime | None = None
    dead_letter: bool = False
    traceback: str = ""
    step: str | None = None


class RunRequeued(EventBase, frozen=True, kw_only=True, tag=True):
    """The reaper (or a worker taking the run) found the lease of ``attempt`` expired and put
    the run back to PENDING. ``worker_id``: the worker whose lease expired; ``last_renewal_at``:
    when that lease was last taken or renewed; ``reason``: the same, in words (None and empty
    in events stored before these fields existed).

    ``suspect``: that worker held other runs too when its lease expired, so the death is not
    charged to this run (its ``max_attempts`` moves up by one with the attempt) and the run
    becomes a suspect that runs alone from now on (``suspect_worker_id`` = ``worker_id``).
    False: the worker held this run alone, the death is charged (events stored before the
    field existed were all charged)."""

    attempt: int
    worker_id: str | None = None
    last_renewal_at: datetime | None = None
    reason: str = ""
    suspect: bool = False


class LeaseReleased(EventBase, frozen=True, kw_only=True, tag=True):
    """A worker gave its lease back so that another worker takes the run at once.

    ``charged``: whether the attempt counts against ``max_attempts``. A worker gives a lease
    back uncharged when the attempt ended through no fault of the run: the worker shut down, or
    the runtime's own stores were away or refusing (it hands the run back once Postgres answers
    again); ``apply`` then moves ``max_attempts`` up by one with the attempt, as for a suspect.
    Events stored before the field existed were all charged. ``reason``: why, in words.
    ``traceback`` and ``step``: as in :class:`RunFailed`, when the attempt ended with an
    exception (its stores were away) that sends the run to another attempt."""

    worker_id: str
    attempt: int
    charged: bool = True
    reason: str = ""
    traceback: str = ""
    step: str | None = None


class RunCancelled(EventBase, frozen=True, kw_only=True, tag=True):
    actor: str
    reason: str = ""


class RunRetried(EventBase, frozen=True, kw_only=True, tag=True):
    """An operator sent a FAILED run back to PENDING with a fresh budget of attempts.

    attempt_count stays monotonic (it is the fencing token); the ceiling moves instead."""

    actor: str
    max_attempts: int


# --- revision events (stream "revision-<project>/<family>/<contract>") -----------------------


class RevisionCreated(EventBase, frozen=True, kw_only=True, tag=True):
    revision_id: uuid.UUID
    contract_family: str
    contract_id: str
    body_hash: str


class RevisionActivated(EventBase, frozen=True, kw_only=True, tag=True):
    contract_family: str
    contract_id: str
    old_revision_id: uuid.UUID | None
    new_revision_id: uuid.UUID
    actor: str = "system"


RunEvent = (
    RunCreated
    | RunClaimed
    | StepCompleted
    | ToolWaitStarted
    | ToolResultReceived
    | ModelCalled
    | ApprovalRequested
    | ApprovalGranted
    | ApprovalRejected
    | ApprovalExpired
    | WaitStarted
    | TimerFired
    | SignalDelivered
    | ChildrenFinished
    | RunCompleted
    | RunFailed
    | RunRequeued
    | LeaseReleased
    | RunCancelled
    | RunRetried
)
RevisionEvent = RevisionCreated | RevisionActivated
Event = RunEvent | RevisionEvent

RUN_EVENT_TYPES: tuple[type[EventBase], ...] = RunEvent.__args__
EVENT_TYPES: tuple[type[EventBase], ...] = Event.__args__
# Events that make a run dispatchable: workers are told about these.
DISPATCH_EVENT_TYPES = frozenset(
    {"RunCreated", "ApprovalGranted", "RunRequeued", "LeaseReleased", "RunRetried"}
    | {"TimerFired", "SignalDelivered", "ChildrenFinished"}
)

_encoder = msgspec.json.Encoder()
_decoder: msgspec.json.Decoder[Event] = msgspec.json.Decoder(Event)


def event_type(event: EventBase) -> str:
    return type(event).__name__


def encode_event(event: EventBase) -> bytes:
    return _encoder.encode(event)


def decode_event(data: bytes | str) -> Event:
    try:
        return _decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise UnknownEventTypeError(str(exc)) from exc


def to_builtins(event: EventBase) -> dict[str, Any]:
    result: dict[str, Any] = msgspec.to_builtins(event)
    return result


def run_stream_id(run_id: uuid.UUID) -> str:
    """The id of ``run_id``'s stream; :func:`run_id_of_stream` reads it back."""
    return f"{RUN_STREAM_PREFIX}{run_id}"


def revision_stream_id(project_id: str, family: str, contract_id: str) -> str:
    return f"{REVISION_PREFIX}{project_id}/{family}/{contract_id}"


# The stream names the runtime writes, each of which says whose stream it is. The database holds
# every row of the log to the same rule (awooop_stream_of_project, migrations/0115).
# A run stream is checked for the shape of a uuid (the database's LIKE
# 'run-________-____-____-____-____________', cheaper than a regular expression there).
RUN_STREAM_PREFIX = "run-"
RUN_STREAM = re.compile(re.escape(RUN_STREAM_PREFIX) + r".{8}-.{4}-.{4}-.{4}-.{12}", re.DOTALL)
DOMAIN_PREFIX = "domain/"
REVISION_PREFIX = "revision-"


def run_stream_sql(column: str) -> str:
    """:func:`run_stream_id` in SQL, over the uuid in ``column`` (a constant column reference of
    the statement it goes in, never input), for statements that live in Python."""
    return f"'{RUN_STREAM_PREFIX}' || {column}::text"


def stream_of_project(stream_id: str, project_id: str) -> bool:
    """Pure: whether ``stream_id`` may be a stream of ``project_id``: a run's stream (whose
    project is its run's: the database asks the run row), or a domain or revision stream that
    names the project."""
    if stream_id.startswith(RUN_STREAM_PREFIX):
        return RUN_STREAM.fullmatch(stream_id) is not None
    for prefix in (DOMAIN_PREFIX, REVISION_PREFIX):
        if stream_id.startswith(prefix):
            own = f"{prefix}{project_id}/"
            return stream_id.startswith(own) and len(stream_id) > len(own)
    return False


def run_id_of_stream(stream_id: str) -> uuid.UUID | None:
    """The inverse of :func:`run_stream_id`: the run whose stream ``stream_id`` is; None for a
    stream that is not a run's."""
    if stream_id.startswith(RUN_STREAM_PREFIX):
        return uuid.UUID(stream_id.removeprefix(RUN_STREAM_PREFIX))
    return None
