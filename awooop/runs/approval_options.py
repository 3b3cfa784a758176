"""What an approval request asks and what its decision answers, besides yes or no (pure).

- A request (``run.wait_for_approval``) may show the reviewer a ``payload`` (a draft, JSON),
  expire after its own ``expires_in`` instead of the worker's AWOOOP_APPROVAL_TTL_S, and say
  what a rejection and an expiry do: :data:`FAIL` (the run fails: E-APPROVAL-004,
  E-APPROVAL-002) or :data:`RETURN` (the run resumes and the handler gets the decision).
- A decision (approve or reject, by token, management token, console or CLI) may carry a
  ``reason`` (at most :data:`MAX_REASON` characters) and an edited payload (JSON, at most
  AWOOOP_STEP_RESULT_MAX_BYTES when encoded, the step result limit: the handler journals it).
  An edited payload equal to the draft is no edit (the handler gets None).

Refusals raise with a code before anything is written: E-INPUT-001 (a reason too long, JSON
that does not parse, an unknown policy, a non-positive expiry), E-DATA-001 (text Postgres
cannot store, a value JSON cannot hold), E-DATA-002 (a payload over the limit).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal

import msgspec

from awooop.core import storable
from awooop.core.config import STEP_RESULT_MAX_BYTES
from awooop.core.errors import InvalidInputError, StepResultTooLargeError, UnstorableValueError

FAIL = "fail"
RETURN = "return"
POLICIES = (FAIL, RETURN)
Policy = Literal["fail", "return"]
MAX_REASON = 2000


def check_policy(what: str, policy: str) -> str:
    if policy not in POLICIES:
        raise InvalidInputError(f"{what} must be 'fail' or 'return', not {policy[:40]!r}")
    return policy


def check_reason(reason: str) -> str:
    if len(reason) > MAX_REASON:
        raise InvalidInputError(f"reason must be at most {MAX_REASON} characters")
    return reason


def expires_in_s(expires_in: timedelta | None) -> float | None:
    """Seconds of a request's own expiry (None: the worker's AWOOOP_APPROVAL_TTL_S)."""
    if expires_in is None:
        return None
    seconds = expires_in.total_seconds()
    if seconds <= 0:
        raise InvalidInputError("expires_in must be positive")
    return seconds


def check_payload(what: str, value: Any, max_bytes: int = STEP_RESULT_MAX_BYTES) -> Any:
    """``value`` as JSON builtins, refused when JSON cannot hold it, Postgres cannot store its
    text or it is larger than ``max_bytes`` as JSON."""
    try:
        data = msgspec.json.encode(value)
    except (TypeError, ValueError, OverflowError, UnicodeEncodeError) as exc:
        raise UnstorableValueError(f"{what} is not storable as JSON: {exc}") from exc
    if len(data) > max_bytes:
        raise StepResultTooLargeError(
            f"{what} is {len(data):,} bytes as JSON, over the limit of {max_bytes:,} "
            "(AWOOOP_STEP_RESULT_MAX_BYTES)"
        )
    decoded = msgspec.json.decode(data)
    refused = storable.problem(decoded, "payload")
    if refused is not None:
        raise UnstorableValueError(f"{what}: {refused}")
    return decoded


def parse_payload(what: str, text: str, max_bytes: int = STEP_RESULT_MAX_BYTES) -> Any:
    """An edited payload given as JSON text (a form's field, a file): None when blank."""
    if not text.strip():
        return None
    if len(text.encode()) > max_bytes:
        return check_payload(what, text, max_bytes)  # too large either way: E-DATA-002
    try:
        value = msgspec.json.decode(text.encode())
    except msgspec.DecodeError as exc:
        raise InvalidInputError(f"{what} is not valid JSON: {exc}") from None
    return check_payload(what, value, max_bytes)
