"""The fakes a :class:`~awooop.testing.HandlerKit` drives a handler with: the clock, the model,
the tools and the scripted approval decisions (see :mod:`awooop.testing`)."""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from awooop.llm.admission import Admit
from awooop.llm.client import ModelRequest
from awooop.llm.gateway import DEFAULT_CONTRACT, LLMResult, ModelCall
from awooop.llm.local import local_completion, local_tokens

START = datetime(2026, 1, 1, tzinfo=UTC)


class Clock:
    """The kit's wall clock: every event's ``at``, a step's ``started_at``, a model call's
    start, an approval's expiry and decision time. It moves only when the test moves it
    (:meth:`advance`, or :meth:`HandlerKit.advance <awooop.testing.HandlerKit.advance>`, which
    also expires approvals whose time ran out)."""

    def __init__(self, start: datetime = START) -> None:
        if start.tzinfo is None:
            raise ValueError("the kit's clock needs an aware datetime (tzinfo=UTC)")
        self._now = start

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> datetime:
        if seconds < 0:
            raise ValueError("the clock does not go back")
        self._now += timedelta(seconds=seconds)
        return self._now


# --- the model ------------------------------------------------------------------------------

# A scripted answer: text, a full LLMResult, an exception (the call fails with it, and is
# recorded with its error), or a function of the prompt giving one of those.
Answer = str | LLMResult | Exception | Callable[[str], "str | LLMResult | Exception"]
Matcher = str | re.Pattern[str] | Callable[[str], bool]


@dataclass(frozen=True)
class ModelCallRecord:
    """One call the fake model answered: what the handler asked and what it got."""

    prompt: str
    contract: tuple[str, str]
    options: Mapping[str, Any]
    result: LLMResult | None
    error: Exception | None


def _matches(matcher: Matcher, prompt: str) -> bool:
    if isinstance(matcher, str):
        return matcher in prompt
    if isinstance(matcher, re.Pattern):
        return matcher.search(prompt) is not None
    return matcher(prompt)


class FakeModel:
    """A model with scripted answers, for ``run.llm``; it records every call (:attr:`calls`).

    ``FakeModel("first answer", "second answer")`` answers calls in order;
    ``.when("Summarise", "a summary")`` (a substring, a compiled regex or a predicate of the
    prompt) answers every call whose prompt matches, before the ordered answers. Past the
    script the answer is the deterministic local model's (``local:<model>@none <hash>``, as with
    ``AWOOOP_LLM_URL=local:``), or :class:`LookupError` with ``strict=True``. Flow control (rate
    limits and budgets, which need Postgres) is not exercised: ``admit`` is ignored."""

    def __init__(self, *answers: Answer, model: str = "fake-model", strict: bool = False) -> None:
        self.model = model
        self.strict = strict
        self._ordered: list[Answer] = list(answers)
        self._rules: list[tuple[Matcher, Answer]] = []
        self.calls: list[ModelCallRecord] = []
        self.clock = Clock()  # the kit sets its own

    def when(self, matcher: Matcher, answer: Answer) -> FakeModel:
        self._rules.append((matcher, answer))
        return self

    @property
    def prompts(self) -> list[str]:
        return [c.prompt for c in self.calls]

    def _answer_for(self, prompt: str) -> Answer | None:
        for matcher, answer in self._rules:
            if _matches(matcher, prompt):
                return answer
        if self._ordered:
            return self._ordered.pop(0)
        if self.strict:
            return LookupError(f"the fake model has no answer for the prompt {prompt[:200]!r}")
        return None

    def _result(self, text: str) -> LLMResult:
        return LLMResult(
            text=text,
            model=self.model,
            revision_id=None,
            body_hash=None,
            input_tokens=None,
            output_tokens=local_tokens(text),
        )

    async def call(
        self,
        project_id: str,
        prompt: str,
        *,
        contract: tuple[str, str] = DEFAULT_CONTRACT,
        options: Mapping[str, Any] | None = None,
        admit: Admit | None = None,
    ) -> ModelCall:
        """What :meth:`awooop.llm.gateway.ModelGateway.call` answers, from the script."""
        answer = self._answer_for(prompt)
        if answer is not None and not isinstance(answer, str | LLMResult | Exception):
            answer = answer(prompt)
        if answer is None:
            answer = local_completion(self.model, None, prompt, None)
        result = self._result(answer) if isinstance(answer, str) else None
        if isinstance(answer, LLMResult):
            result = answer
        if result is not None and result.input_tokens is None:
            result.input_tokens = local_tokens(prompt)
        error = answer if isinstance(answer, Exception) else None
        opts = dict(options or {})
        self.calls.append(ModelCallRecord(prompt, contract, opts, result, error))
        request = ModelRequest(model=self.model, prompt=prompt, options=opts)
        return ModelCall(contract, self.clock.now(), 0.0, request, result, error, prompt)


# --- tools ----------------------------------------------------------------------------------

ToolAnswer = Any  # a value, an exception (raised to the handler), or a function giving one


@dataclass
class ToolCall:
    """A tool call of the handler (``run.wait_for_tool``) as the fake tools saw it."""

    tool: str
    attempt: int
    answer_value: Any = None
    error: BaseException | None = None
    done: bool = False
    _future: asyncio.Future[Any] | None = field(default=None, repr=False)

    def answer(self, value: Any) -> None:
        """Answer a call that waits for the test (:meth:`FakeTools.next_call`)."""
        assert self._future is not None, "this call was answered by the script"
        self._future.set_result(value)

    def fail(self, error: BaseException) -> None:
        assert self._future is not None, "this call was answered by the script"
        self._future.set_exception(error)


class FakeTools:
    """Answers ``run.wait_for_tool`` calls instead of the handler's own ``call`` function.

    ``answers`` maps a tool to its answer, or to a list of answers for successive runs (an
    exception is raised to the handler; a function, sync or async, without arguments, gives
    the answer). A tool not in ``answers`` runs the handler's own function with
    ``passthrough=True``; else the call waits until the test answers it
    (``call = await tools.next_call("search"); call.answer(hits)``). Every answer is bounded
    by ``timeout_s``: past it the handler gets :class:`TimeoutError`, as from a tool that did
    not answer in time. :attr:`calls` records every call and its answer."""

    def __init__(
        self,
        answers: Mapping[str, ToolAnswer | Sequence[ToolAnswer]] | None = None,
        *,
        timeout_s: float = 5.0,
        passthrough: bool = False,
    ) -> None:
        self._scripts: dict[str, list[ToolAnswer]] = {}
        for tool, answer in (answers or {}).items():
            many = isinstance(answer, list | tuple)
            self._scripts[tool] = list(answer) if many else [answer]
        self.timeout_s = timeout_s
        self.passthrough = passthrough
        self.calls: list[ToolCall] = []
        self._waiting: dict[str, asyncio.Queue[ToolCall]] = {}

    def _queue(self, tool: str) -> asyncio.Queue[ToolCall]:
        return self._waiting.setdefault(tool, asyncio.Queue())

    async def next_call(self, tool: str, *, timeout_s: float = 5.0) -> ToolCall:
        """The next call of ``tool`` that waits for the test to answer it."""
        return await asyncio.wait_for(self._queue(tool).get(), timeout_s)

    def wrap(
        self, tool: str, attempt: int, own: Callable[[], Awaitable[Any]]
    ) -> Callable[[], Awaitable[Any]]:
        """The function ``run.wait_for_tool`` calls instead of the handler's ``own``."""

        async def answered() -> Any:
            call = ToolCall(tool, attempt)
            self.calls.append(call)
            try:
                async with asyncio.timeout(self.timeout_s):
                    value = await self._answer(call, own)
            except TimeoutError as exc:
                call.error, call.done = exc, True
                raise TimeoutError(f"tool {tool!r}: no answer within {self.timeout_s}s") from exc
            except BaseException as exc:
                call.error, call.done = exc, True
                raise
            call.answer_value, call.done = value, True
            return value

        return answered

    async def _answer(self, call: ToolCall, own: Callable[[], Awaitable[Any]]) -> Any:
        script = self._scripts.get(call.tool)
        if script:
            answer = script.pop(0) if len(script) > 1 else script[0]
        elif self.passthrough:
            return await own()
        else:
            call._future = asyncio.get_running_loop().create_future()
            self._queue(call.tool).put_nowait(call)
            return await call._future
        if isinstance(answer, BaseException):
            raise answer
        if callable(answer):
            answer = answer()
            if inspect.isawaitable(answer):
                answer = await answer
        return answer
