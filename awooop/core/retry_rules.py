"""The rules of a retry policy's numbers and codes, pure, shared by the policies declared in
handler code (:mod:`awooop.worker.policies`) and a policy contract's ``retry`` section
(:mod:`awooop.revisions.body`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

RETRYABLE: Final = "retryable"  # in a policy's ``on``: every error the catalog marks retryable
# The fields a contract's ``retry`` section may set (each optional), and their types.
RETRY_FIELDS: Final = {
    "max_attempts": int,
    "initial_s": float,
    "multiplier": float,
    "max_s": float,
    "jitter": float,
    "on": list,
}


def retry_problem(
    *,
    max_attempts: int,
    initial_s: float,
    multiplier: float,
    max_s: float,
    jitter: float,
    codes: Iterable[str],
) -> str | None:
    """Pure: what is wrong with a retry policy's values (None: nothing)."""
    if max_attempts < 1:
        return "max_attempts must be at least 1"
    if initial_s < 0 or max_s < 0:
        return "initial_s and max_s must not be negative"
    if multiplier < 1:
        return "multiplier must be at least 1"
    if not 0 <= jitter <= 1:
        return "jitter must be between 0 and 1"
    for code in codes:
        if code != RETRYABLE and not code.startswith("E-"):
            return f"on: {code!r} is neither an error code nor {RETRYABLE!r}"
    return None
