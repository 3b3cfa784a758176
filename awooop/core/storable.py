"""What Postgres cannot store, found before a statement is sent (pure).

``jsonb`` and ``text`` refuse two things a Python string can hold: the NUL character
(``\\u0000``; Postgres raises UntranslatableCharacterError for jsonb, CharacterNotInRepertoire
for text) and lone UTF-16 surrogates (not UTF-8 at all: encoding the statement's arguments
fails). One such string in one item of a group commit makes the whole statement fail.
:func:`problem` walks a JSON value and names the first such string by its path, so the caller
can refuse that one item with a readable reason before anything is sent; the group commit's
per-item fallback (:mod:`awooop.core.batching`) still isolates what only Postgres detects.

A reason never quotes the bad character itself (excerpts go through ``repr``, which escapes
it): the reason is stored too, in a ``RunFailed`` or an error answer.
"""

from __future__ import annotations

from typing import Any

import msgspec

from awooop.core.errors import UnstorableValueError

_encode = msgspec.json.Encoder().encode
EXCERPT_CHARS = 40
NUL = "\x00"
_KEY = object()  # a path step: the key itself, not the value under it


def problem(value: Any, where: str = "value", max_depth: int | None = None) -> str | None:
    """Why Postgres would refuse ``value`` (JSON builtins: dict, list, str, numbers, None) in
    a jsonb or text column, naming the place (``where`` and the path below it); None when it
    would take it. ``max_depth`` also refuses nesting deeper than that many levels. Iterative:
    no recursion limit to hit."""
    stack: list[tuple[Any, tuple[object, ...], int]] = [(value, (), 1)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            found = _text_problem(item)
            if found is not None:
                return f"{_place(where, path)}: {found}"
        elif isinstance(item, dict | list | tuple):
            if max_depth is not None and depth > max_depth:
                return f"{_place(where, path)}: JSON nesting deeper than {max_depth} levels"
            if isinstance(item, dict):
                for key, sub in reversed(item.items()):
                    stack.append((sub, (*path, key), depth + 1))
                    if isinstance(key, str) and _text_problem(key) is not None:
                        stack.append((key, (*path, _KEY), depth))
            else:
                stack.extend(
                    (sub, (*path, i), depth + 1) for i, sub in reversed(list(enumerate(item)))
                )
    return None


def encoded_problem(value: Any, where: str = "value") -> str | None:
    """:func:`problem` for any msgspec-encodable value (Structs too), with a fast path: the
    value is encoded to JSON first (C speed) and walked only when that fails or shows a
    ``\\u0000`` escape (which an escaped backslash followed by ``u0000`` also shows: then the
    walk finds nothing)."""
    try:
        data = _encode(value)
    except UnicodeEncodeError:
        pass
    else:
        if b"\\u0000" not in data:
            return None
    return problem(msgspec.to_builtins(value), where)


def _text_problem(text: str) -> str | None:
    at = text.find(NUL)
    if at >= 0:
        return (
            f"text {_excerpt(text, at)} contains \\u0000 (NUL), which Postgres cannot store "
            "in text or jsonb"
        )
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            return (
                f"text {_excerpt(text, exc.start)} holds a lone surrogate, which is not "
                "valid Unicode text"
            )
    return None


def _excerpt(text: str, at: int) -> str:
    """A short ``repr`` around position ``at`` (escapes NUL and surrogates)."""
    start = max(0, at - EXCERPT_CHARS // 2)
    end = min(len(text), start + EXCERPT_CHARS)
    shown = repr(text[start:end])
    return f"{'...' if start else ''}{shown}{'...' if end < len(text) else ''}"


def _place(where: str, path: tuple[object, ...]) -> str:
    parts = []
    for key in path:
        if key is _KEY:
            parts.append(" (a key)")
        else:
            shown = repr(key)
            parts.append(f"[{shown[:EXCERPT_CHARS]}{'...' if len(shown) > EXCERPT_CHARS else ''}]")
    return where + "".join(parts)


def sanitized(text: str) -> str:
    """``text`` with NUL and lone surrogates escaped (``\\u0000``, ``\\ud800``): for reasons
    and messages built from arbitrary exception text, which must be storable themselves."""
    if NUL in text:
        text = text.replace(NUL, "\\u0000")
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def unstorable(what: str, exc: BaseException) -> UnstorableValueError:
    """The E-DATA-001 error for ``what`` (say "the return value"), which Postgres refused, or
    would refuse, with ``exc`` (an UnstorableValueError from :func:`problem`, or Postgres's own
    error: its DETAIL line is kept). The message names the place and never holds the bad
    character itself."""
    if isinstance(exc, UnstorableValueError):
        text = exc.message
    else:
        text = f"{type(exc).__name__}: {exc}"
        detail = getattr(exc, "detail", None)  # asyncpg's PostgresError: Postgres's DETAIL
        if detail and detail not in text:
            text += f" ({detail})"
        text = " ".join(text.split())  # one line
    return UnstorableValueError(sanitized(f"{what} could not be stored: {text}"))
