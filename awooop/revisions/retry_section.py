"""The ``retry`` sections of contract bodies, checked (pure): part of
:func:`awooop.revisions.body.validate_body`, which runs when a revision is created and again
when it is activated, so that a section the runtime cannot use is never active.

- ``policy_routing``: ``"retry": {"max_attempts": 5, "initial_s": 1, ...}``, the retry policy of
  the model calls the policy routes: the fields of a retry policy
  (:data:`awooop.core.retry_rules.RETRY_FIELDS`), each optional.
- ``agent`` (a run's contract): ``"retry": {"steps": {NAME: ENTRY}, "tools": {NAME: ENTRY}}``,
  the policies of the run's steps (``run.step(NAME, ...)``) and tool calls
  (``run.wait_for_tool(NAME, ...)``) by name; an ENTRY has the same fields, each optional, and
  ``timeout_s`` (each try's timeout, seconds). How the worker applies them:
  :mod:`awooop.worker.contract_retry`.

A refusal is :class:`InvalidContractBodyError` (E-REVISION-006); its message begins with the
family and the path in the body (``agent: retry.steps.fetch: max_attempts must be at least
1``) and its ``path`` detail is that path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from awooop.core.errors import InvalidContractBodyError
from awooop.core.retry_rules import RETRY_FIELDS, retry_problem

# What an agent contract's section names, and the fields of each entry.
AGENT_KINDS: Final = ("steps", "tools")
ENTRY_FIELDS: Final = {**RETRY_FIELDS, "timeout_s": float}
WORDS: Final = {
    "max_attempts": "an integer",
    "on": "a list of error codes",
    "timeout_s": "a positive number",
    **{name: "a number" for name in ("initial_s", "multiplier", "max_s", "jitter")},
}


def refused(family: str, path: str, problem: str) -> InvalidContractBodyError:
    return InvalidContractBodyError(f"{family}: {path}: {problem}", path=path)


def check_policy_retry(family: str, section: Any) -> None:
    """A ``policy_routing`` body's ``retry`` section."""
    check_entry(family, "retry", section, RETRY_FIELDS)


def check_agent_retry(family: str, section: Any) -> None:
    """An ``agent`` body's ``retry`` section."""
    if not isinstance(section, dict):
        raise refused(family, "retry", "must be an object")
    for key in sorted(section):
        if key not in AGENT_KINDS:
            hint = (
                " (a model call's policy is set by its policy_routing contract's retry section)"
                if key in RETRY_FIELDS
                else ""
            )
            raise refused(family, f"retry.{key}", f"unknown field: steps or tools{hint}")
    for kind in AGENT_KINDS:
        entries = section.get(kind, {})
        if not isinstance(entries, dict):
            raise refused(family, f"retry.{kind}", "must map names to policies")
        for name, entry in entries.items():
            if not name:
                raise refused(family, f"retry.{kind}", "a name must not be empty")
            check_entry(family, f"retry.{kind}.{name}", entry, ENTRY_FIELDS)


def check_entry(family: str, path: str, entry: Any, fields: Mapping[str, type]) -> None:
    """One policy: only ``fields``, each of its type, together a valid retry policy."""
    if not isinstance(entry, dict):
        raise refused(family, path, "must be an object")
    unknown = sorted(set(entry) - set(fields))
    if unknown:
        raise refused(family, f"{path}.{unknown[0]}", "unknown field")
    for name, kind in fields.items():
        if name in entry and not _fits(entry[name], kind):
            raise refused(family, f"{path}.{name}", f"must be {WORDS[name]}")
    if "timeout_s" in entry and not entry["timeout_s"] > 0:
        raise refused(family, f"{path}.timeout_s", f"must be {WORDS['timeout_s']}")
    problem = retry_problem(
        max_attempts=entry.get("max_attempts", 1),
        initial_s=entry.get("initial_s", 0.0),
        multiplier=entry.get("multiplier", 1.0),
        max_s=entry.get("max_s", 0.0),
        jitter=entry.get("jitter", 0.0),
        codes=entry.get("on", []),
    )
    if problem is not None:
        raise refused(family, path, problem)


def _fits(value: Any, kind: type) -> bool:
    if isinstance(value, bool):
        return False
    if kind is list:
        return isinstance(value, list) and all(isinstance(c, str) for c in value)
    return isinstance(value, int if kind is int else int | float)
