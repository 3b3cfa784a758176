"""The pure parts of retry policies (awooop.worker.policies): backoff, what is retried, the
refusal of a malformed policy, and what the tries of a step say."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from awooop.core.errors import (
    DatabaseUnavailableError,
    FlowWaitTooLongError,
    InvalidInputError,
    LeaseLostError,
    ModelResponseError,
    ModelUnavailableError,
    OverBudgetError,
    ToolTimeoutError,
)
from awooop.core.events import StepCompleted
from awooop.projections.base import LogEvent
from awooop.projections.timeline import entry
from awooop.worker.policies import (
    MODEL_DEFAULT,
    RETRYABLE,
    STEP_DEFAULT,
    TOOL_DEFAULT,
    Retry,
    Tries,
)
from tests.unit.test_run_facts import recorded

T0 = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def test_backoff_doubles_from_half_a_second_and_is_capped() -> None:
    middle = Retry(max_s=3.0)  # jitter drawn at 0.5: no change
    assert [middle.delay(n, lambda: 0.5) for n in (1, 2, 3, 4, 5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert Retry().delay(1, lambda: 0.0) == pytest.approx(0.45)  # -10 %
    assert Retry().delay(1, lambda: 0.999999) == pytest.approx(0.55, abs=1e-5)  # +10 %
    assert Retry(jitter=0, multiplier=1, initial_s=0.2).delay(7, lambda: 0.9) == 0.2


def test_defaults_retry_the_catalogs_retryable_errors_and_steps_not_at_all() -> None:
    assert (MODEL_DEFAULT.max_attempts, TOOL_DEFAULT.max_attempts) == (3, 3)
    assert STEP_DEFAULT.max_attempts == 1
    assert MODEL_DEFAULT.retries(ModelUnavailableError())
    assert MODEL_DEFAULT.retries(ModelResponseError("503", status=503))
    assert not MODEL_DEFAULT.retries(ModelResponseError("400", status=400))
    assert not MODEL_DEFAULT.retries(ModelResponseError("malformed answer"))
    assert not MODEL_DEFAULT.retries(OverBudgetError())
    assert not MODEL_DEFAULT.retries(FlowWaitTooLongError())  # it waited already
    assert TOOL_DEFAULT.retries(ToolTimeoutError())
    assert not TOOL_DEFAULT.retries(ValueError("a handler's own"))


def test_a_policy_names_types_and_codes_and_never_retries_the_runtimes_own_errors() -> None:
    policy = Retry(on=(KeyError, "E-BUDGET-001"))
    assert policy.retries(KeyError("x")) and policy.retries(OverBudgetError())
    assert not policy.retries(ModelUnavailableError())  # RETRYABLE not named
    everything = Retry(on=(Exception, RETRYABLE))
    assert not everything.retries(LeaseLostError())
    assert not everything.retries(DatabaseUnavailableError())


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_attempts": 0},
        {"initial_s": -1.0},
        {"multiplier": 0.5},
        {"jitter": 2.0},
        {"on": ("retryable-ish",)},
        {"on": (int,)},
    ],
)
def test_a_malformed_policy_is_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidInputError):
        Retry(**kwargs)  # type: ignore[arg-type]


def test_tries_decide_whether_another_follows_and_keep_each_error() -> None:
    tries = Tries(Retry(max_attempts=2, on=(ValueError,), jitter=0))
    tries.count = 1
    tries.failed(ValueError("first"))
    assert tries.next_delay == 0.5
    tries.count = 2
    tries.failed(ValueError("second"))
    assert tries.next_delay is None  # no try left
    assert tries.fields() == {
        "tries": 2,
        "try_errors": ("ValueError: first", "ValueError: second"),
    }
    other = Tries(Retry(on=(ValueError,)))
    other.count = 1
    other.failed(KeyError("not named"))
    assert other.next_delay is None


def test_a_timeline_shows_tries_only_when_there_were_several() -> None:
    once = StepCompleted(at=T0, worker_id="w1", attempt=1, step="a", result=1)
    thrice = StepCompleted(
        at=T0, worker_id="w1", attempt=1, step="b", result=2, tries=3, try_errors=("X: 1", "X: 2")
    )
    retried = LogEvent.from_recorded(recorded(2, thrice))
    assert entry(0, LogEvent.from_recorded(recorded(1, once)), newer=True).detail == {"step": "a"}
    assert entry(0, retried, newer=True).detail == {
        "step": "b",
        "tries": 3,
        "try_errors": ("X: 1", "X: 2"),
    }
    # The projector's table leaves them out: an older release folds the same rows.
    assert entry(0, retried).detail == {"step": "b"}


def test_a_failed_try_is_kept_storable_and_without_secrets() -> None:
    tries = Tries(Retry(on=(ValueError,)))
    tries.count = 1
    tries.failed(ValueError("no\x00way to postgresql://app:hunter2@db/orders " + "x" * 400))
    [said] = tries.errors
    assert "\x00" not in said and "hunter2" not in said and "[redacted]" in said
    assert said.startswith("ValueError: no") and len(said) <= 320
