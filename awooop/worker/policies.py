"""Retry policies and timeouts of a handler's steps, tool calls and model calls.

``run.step(name, fn, retry=Retry(...), timeout=...)``, ``run.wait_for_tool(tool, call,
retry=..., timeout=...)`` and ``run.llm(prompt, retry=..., timeout=...)`` try their work
again, inside the attempt, when it raises an error its policy names, waiting a backoff
between tries; the run's own attempts (``max_attempts``) are another thing: a run is
attempted again only when its attempt ended without failing it (a crash, a lost lease, a
shutdown), never for a handler's exception (:mod:`awooop.worker.outcomes`).

Defaults (docs/workers.md, Retries and timeouts):

| call              | tries | retried errors                                             |
|-------------------|-------|------------------------------------------------------------|
| ``run.llm``       | 3     | the catalog's retryable errors (E-LLM-001), and E-LLM-002  |
|                   |       | when the model server answered a transient status          |
| ``wait_for_tool`` | 3     | the catalog's retryable errors (E-TOOL-001: a timeout)     |
| ``run.step``      | 1     | none: a handler's exception is not retried unless told     |

with a backoff of 0.5 s, doubling, at most 30 s, each wait drawn within +-10 % (jitter).
No timeout unless one is given. A model call's policy contract may carry a ``retry`` section
(:func:`with_contract`): its fields replace the code's for the calls its revision routes; the
run's ``agent`` contract, entries per step and tool name, the same way
(:mod:`awooop.worker.contract_retry`).
Every try is journaled: a model call's tries are each a ``ModelCalled`` (``try_number``,
``next_try_in_s``); a step's or tool's failed tries are listed on its ``StepCompleted``
(``tries``, ``try_errors``) once it succeeds, and the last try's error fails the run (a note
on its traceback counts the tries).

Errors of the runtime itself are never retried here (the lease lost, Postgres or Redis
away, a step name used twice, a value Postgres cannot store): they end the attempt as
before. A backoff is an ``asyncio.sleep``: the heartbeat keeps renewing the lease meanwhile,
and a shutdown or a cancellation cancels it like any ``await`` (the attempt is handed back;
the next attempt starts the step or call from its first try).
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Final, TypedDict, TypeVar

from awooop.core.errors import (
    AwoooPError,
    DatabaseUnavailableError,
    DuplicateStepError,
    FlowWaitTooLongError,
    InvalidInputError,
    LeaseLostError,
    ModelResponseError,
    ModelUnavailableError,
    RedisUnavailableError,
    StepTimeoutError,
    ToolTimeoutError,
    UnstorableValueError,
)
from awooop.core.excerpts import redacted
from awooop.core.retry_rules import RETRY_FIELDS, RETRYABLE, retry_problem
from awooop.core.storable import sanitized
from awooop.llm.gateway import LLMResult, ModelCall

T = TypeVar("T")

# Statuses of a model server's error answer that say "try again" (its E-LLM-002 is retried).
TRANSIENT_STATUSES: Final = frozenset({408, 425, 429, 500, 502, 503, 504})
NEVER_RETRIED: Final = (
    LeaseLostError,
    DatabaseUnavailableError,
    RedisUnavailableError,
    DuplicateStepError,
    UnstorableValueError,
)
MAX_REASON_CHARS: Final = 300  # of each failed try kept on StepCompleted.try_errors


@dataclass(frozen=True)
class Retry:
    """How often, and after which errors, a step or call is tried again.

    ``max_attempts``: tries in all (1: no retry). The wait before try n+1 is
    ``min(max_s, initial_s * multiplier**(n-1))``, moved by up to ``jitter`` of itself either
    way. ``on``: what is retried: exception types, error codes (``"E-LLM-002"``) and
    :data:`RETRYABLE` (every error the catalog marks retryable)."""

    max_attempts: int = 3
    initial_s: float = 0.5
    multiplier: float = 2.0
    max_s: float = 30.0
    jitter: float = 0.1
    on: tuple[str | type[BaseException], ...] = (RETRYABLE,)

    def __post_init__(self) -> None:
        problem = policy_problem(self)
        if problem is not None:
            raise InvalidInputError(f"Retry: {problem}", policy=repr(self))

    def delay(self, tries: int, draw: Callable[[], float] = random.random) -> float:
        """The wait after ``tries`` failed tries (``draw``: uniform in [0, 1))."""
        base = min(self.max_s, self.initial_s * self.multiplier ** max(0, tries - 1))
        return max(0.0, base * (1.0 + self.jitter * (2.0 * draw() - 1.0)))

    def retries(self, exc: BaseException) -> bool:
        """Whether ``exc`` is tried again under this policy (tries left or not)."""
        if isinstance(exc, NEVER_RETRIED) or not isinstance(exc, Exception):
            return False
        for kind in self.on:
            if kind == RETRYABLE and retryable(exc):
                return True
            if isinstance(kind, str) and isinstance(exc, AwoooPError) and exc.code == kind:
                return True
            if isinstance(kind, type) and isinstance(exc, kind):
                return True
        return False


def policy_problem(policy: Retry) -> str | None:
    """Pure: what is wrong with ``policy`` (None: nothing)."""
    for kind in policy.on:
        exception_type = isinstance(kind, type) and issubclass(kind, BaseException)
        if not isinstance(kind, str) and not exception_type:
            return f"on: {kind!r} is not an exception type"
    return retry_problem(
        max_attempts=policy.max_attempts,
        initial_s=policy.initial_s,
        multiplier=policy.multiplier,
        max_s=policy.max_s,
        jitter=policy.jitter,
        codes=[kind for kind in policy.on if isinstance(kind, str)],
    )


def with_contract(policy: Retry, section: dict[str, Any] | None) -> Retry:
    """``policy`` with the retry fields a contract's section sets (other keys are not its:
    ``timeout_s``); checked when its revision was created and activated
    (:mod:`awooop.revisions.retry_section`)."""
    if not section:
        return policy
    fields: dict[str, Any] = {
        k: tuple(v) if k == "on" else v for k, v in section.items() if k in RETRY_FIELDS
    }
    return replace(policy, **fields)


def retryable(exc: BaseException) -> bool:
    """Pure: whether the catalog marks ``exc`` retryable (a model server's error answer with a
    transient status counts: its E-LLM-002 says the server is busy, not the request wrong; a
    model call's flow-control wait that ran out, E-BUDGET-002, does not: it waited already)."""
    if isinstance(exc, ModelResponseError):
        return exc.details.get("status") in TRANSIENT_STATUSES
    if isinstance(exc, FlowWaitTooLongError):
        return False  # the call already waited as long as flow control allows
    return isinstance(exc, AwoooPError) and exc.retryable


NO_RETRY: Final = Retry(max_attempts=1)
MODEL_DEFAULT: Final = Retry()
TOOL_DEFAULT: Final = Retry()
STEP_DEFAULT: Final = NO_RETRY


def check_timeout(timeout: float | None) -> None:
    if timeout is not None and not timeout > 0:
        raise InvalidInputError("timeout must be a positive number of seconds", timeout=timeout)


@dataclass
class Tries:
    """The tries of one step or call so far."""

    policy: Retry
    count: int = 0
    errors: list[str] = field(default_factory=list)
    next_delay: float | None = None  # after the last failed try; None: no try follows

    def failed(self, exc: BaseException, draw: Callable[[], float] = random.random) -> None:
        """Note the current try's failure; decide whether (and after what wait) one follows."""
        # Kept storable whatever the error says, what looks like a secret redacted (as a
        # failure's reason is: awooop.worker.outcomes.failure_of).
        said = sanitized(redacted(f"{error_code(exc)}: {exc}")[:MAX_REASON_CHARS])
        self.errors.append(said)
        more = self.count < self.policy.max_attempts and self.policy.retries(exc)
        self.next_delay = self.policy.delay(self.count, draw) if more else None

    def mark(self, call: ModelCall) -> ModelCall:
        """A model call of this try, its failure noted, with its try number and the wait before
        the next try (None: none follows) as its record keeps them."""
        if call.request is not None:  # routed: its policy contract may set the policy
            self.policy = with_contract(self.policy, call.request.retry)
        if call.error is not None:
            self.failed(call.error)
        else:
            self.next_delay = None
        return replace(call, try_number=self.count, next_try_in_s=self.next_delay)

    def fields(self) -> dict[str, Any]:
        """What a journaled step's ``StepCompleted`` says of its tries."""
        return {"tries": self.count, "try_errors": tuple(self.errors)}

    def note(self, what: str, exc: BaseException) -> None:
        """Say on ``exc``'s traceback how many tries it ended (when it could have had more)."""
        if self.policy.max_attempts > 1:
            exc.add_note(f"{what}: try {self.count} of {self.policy.max_attempts}, no try follows")


def error_code(exc: BaseException) -> str:
    return exc.code if isinstance(exc, AwoooPError) else type(exc).__name__


def timeout_error(kind: type[AwoooPError], what: str, timeout: float, tries: Tries) -> Exception:
    return kind(
        f"{what} did not finish within {timeout:g} s (try {tries.count} of "
        f"{tries.policy.max_attempts})",
        timeout_s=timeout,
    )


class How(TypedDict, total=False):
    """The keywords ``run.step`` and ``run.wait_for_tool`` take beside their own."""

    retry: Retry
    timeout: float | None


async def step_tries(
    fn: Callable[[], Awaitable[T]], how: How, name: str, check: Callable[[], None]
) -> tuple[T, Tries]:
    """A step's ``fn()`` under its policy (default: one try)."""
    policy, timeout = how.get("retry", STEP_DEFAULT), how.get("timeout")
    return await tried(fn, policy, timeout, f"step {name!r}", check, StepTimeoutError)


async def tool_tries(
    fn: Callable[[], Awaitable[T]], how: How, tool: str, check: Callable[[], None]
) -> tuple[T, Tries]:
    """A tool call under its policy (default: the catalog's retryable errors, 3 tries)."""
    policy, timeout = how.get("retry", TOOL_DEFAULT), how.get("timeout")
    return await tried(fn, policy, timeout, f"tool {tool!r}", check, ToolTimeoutError)


async def tried(
    fn: Callable[[], Awaitable[T]],
    policy: Retry,
    limit_s: float | None,
    what: str,
    check: Callable[[], None],
    on_timeout: type[AwoooPError],
) -> tuple[T, Tries]:
    """``fn()`` under ``policy`` and ``timeout`` (each try's): its result and its tries, or the
    last try's error (with a note counting the tries). ``check`` runs before every try."""
    if not isinstance(policy, Retry):
        raise InvalidInputError(f"{what}: retry must be a Retry", retry=repr(policy))
    check_timeout(limit_s)
    tries = Tries(policy)
    while True:
        tries.count += 1
        check()
        late = functools.partial(timeout_error, on_timeout, what, limit_s or 0.0, tries)
        try:
            return await within(fn(), limit_s, late), tries
        except Exception as exc:
            tries.failed(exc)
            if tries.next_delay is None:
                tries.note(what, exc)
                raise
        await asyncio.sleep(tries.next_delay)


async def within(work: Awaitable[T], limit_s: float | None, late: Callable[[], Exception]) -> T:
    """``work``'s result; ``late()`` raised when ``limit_s`` (None: no limit) ran out first."""
    if limit_s is None:
        return await work
    scope = asyncio.timeout(limit_s)
    try:
        async with scope:
            return await work
    except TimeoutError as exc:
        if scope.expired():
            raise late() from exc
        raise


class ModelTries:
    """The tries of one ``run.llm`` call: ``run.llm`` takes ``retry=`` and ``timeout=`` among
    its options (:meth:`of`), makes each try under :meth:`timed` and marks its record with the
    try (:meth:`mark`); and, once the try is recorded, :meth:`after` answers, raises, or waits and
    calls ``run.llm`` again with these tries."""

    def __init__(self, policy: Retry, timeout: float | None) -> None:
        self.tries = Tries(policy)
        self.timeout = timeout

    @classmethod
    def of(cls, options: dict[str, Any]) -> ModelTries:
        """The tries named by ``options`` (``retry``, ``timeout``: taken out of them)."""
        retry, timeout = options.pop("retry", None), options.pop("timeout", None)
        if isinstance(retry, ModelTries):
            tries = retry
        elif retry is None or isinstance(retry, Retry):
            check_timeout(timeout)
            tries = cls(retry or MODEL_DEFAULT, timeout)
        else:
            raise InvalidInputError("run.llm: retry must be a Retry", retry=repr(retry))
        tries.tries.count += 1
        return tries

    def timed(
        self, work: Awaitable[ModelCall], contract: tuple[str, str], prompt: str
    ) -> Awaitable[ModelCall]:
        """The model call ``work`` under this call's timeout (past it, a failed call, E-LLM-001,
        to record in its place); without a timeout ``work`` itself: no frame of its own around
        a call that may wait for minutes."""
        if self.timeout is None:
            return work
        return model_timeout(work, self.timeout, contract, prompt)

    def mark(self, call: ModelCall) -> ModelCall:
        """The call of this try, marked with it (:meth:`Tries.mark`)."""
        return self.tries.mark(call)

    async def after(
        self,
        call: ModelCall,
        again: Callable[..., Awaitable[T]],
        prompt: str,
        contract: tuple[str, str],
        options: dict[str, Any],
    ) -> T | LLMResult:
        """``call``'s answer or error; or, after the wait its record names, the next try."""
        delay = self.tries.next_delay
        if call.error is None or delay is None:
            if call.error is not None and self.tries.count > 1:
                self.tries.note("the model call", call.error)
            return call.unwrap()
        await asyncio.sleep(delay)
        return await again(prompt, contract=contract, retry=self, **options)


async def model_timeout(
    call: Awaitable[ModelCall], limit_s: float | None, contract: tuple[str, str], prompt: str
) -> ModelCall:
    """``call``, or past ``limit_s`` a failed call (E-LLM-001) to record in its place. (The
    error is made when the time runs out: a call waiting on its model holds nothing more.)"""
    if limit_s is None:
        return await call
    started = datetime.now(UTC)
    made: list[ModelUnavailableError] = []

    def late() -> ModelUnavailableError:
        made.append(ModelUnavailableError(f"the model did not answer within {limit_s:g} s"))
        return made[0]

    try:
        return await within(call, limit_s, late)
    except ModelUnavailableError as exc:
        if not made or exc is not made[0]:
            raise
        return ModelCall(
            contract=contract,
            started_at=started,
            duration_s=limit_s,
            request=None,
            result=None,
            error=made[0],
            prompt=prompt,
        )
