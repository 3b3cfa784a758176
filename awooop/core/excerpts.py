"""Text kept for operators, within bounds (pure): capped to a size, secrets taken out.

A failure's traceback and a model call's prompt and answer are stored in the run's events so
that the run page and ``awooop runs show`` can show them. Events are never rewritten and every
reader of the log pays for their size, so each text is capped (:func:`capped`: the head, and
for a traceback the tail too, where the raising frame is, with a marker that says how much was
cut), and a traceback is passed through :func:`redacted`: exception messages and source lines
quote what the code held (a URL with its password, an ``Authorization`` header).
"""

from __future__ import annotations

import re
import traceback

from awooop.core.storable import sanitized

TRACEBACK_CHARS = 8192
REDACTED = "[redacted]"


def marker(cut: int) -> str:
    return f"\n[... {cut} characters cut ...]\n"


def kept(text: str, limit: int) -> str:
    """``text`` storable (:func:`awooop.core.storable.sanitized`) and capped to ``limit``
    characters, its head kept: a prompt, an answer."""
    return capped(sanitized(text), limit)


def capped(text: str, limit: int, *, keep_tail: bool = False) -> str:
    """``text`` if it has at most ``limit`` characters; otherwise its first characters (and,
    with ``keep_tail``, its last ones, half each) around a marker naming how many were cut,
    ``limit`` characters in all (the marker included)."""
    if len(text) <= limit:
        return text
    room = limit - len(marker(len(text)))
    if room <= 0:
        return text[:limit]
    # The marker names the count cut, whose digits depend on the room left: settle it.
    while room + len(marker(len(text) - room)) < limit:
        room += 1
    cut = marker(len(text) - room)
    if not keep_tail:
        return text[:room] + cut
    head = room - room // 2
    tail = room // 2
    return text[:head] + cut + (text[len(text) - tail :] if tail else "")


# Secrets as code and libraries print them. Each pattern keeps what says where the secret was
# (group 1) and replaces the secret itself.
_PATTERNS: tuple[re.Pattern[str], ...] = (
    # Authorization: Bearer <token>, Basic <credentials>
    re.compile(r"(\b(?:bearer|basic)\s+)[A-Za-z0-9._~+/=-]+", re.IGNORECASE),
    # the runtime's own tokens: API tokens (awp_<id>_<secret>) and approval tokens (apv_...)
    re.compile(r"(\b)(?:awp|apv)_[A-Za-z0-9_-]{8,}"),
    # a URL with a password: scheme://user:password@host
    re.compile(r"(\b[a-z][a-z0-9+.-]*://[^\s:/@'\"]*:)[^\s@/'\"]+(?=@)", re.IGNORECASE),
    # password=..., token: '...', "secret": "...", api_key=..., in code, logs, JSON, queries
    re.compile(
        r"""(\b[\w-]*(?:password|passwd|pwd|token|secret|api[_-]?key|credentials?)[\w-]*"""
        r"""['"]?\s*[=:]\s*['"]?)[^\s'",&;)}\]]+""",
        re.IGNORECASE,
    ),
)


def redacted(text: str) -> str:
    """``text`` with the values that look like secrets replaced by ``[redacted]``: bearer and
    basic credentials, awooop API and approval tokens, the password of a URL, and the value of
    any ``password``/``token``/``secret``/``api_key``/``credentials`` assignment."""
    for pattern in _PATTERNS:
        text = pattern.sub(lambda m: m.group(1) + REDACTED, text)
    return text


def failure_traceback(exc: BaseException, limit: int = TRACEBACK_CHARS) -> str:
    """The traceback of ``exc`` as Python prints it (its frames and chained causes, no local
    variables), secrets redacted, capped to ``limit`` characters keeping its head and its tail
    (the raising frame and the message), storable whatever it quotes."""
    text = "".join(traceback.format_exception(exc))
    return capped(sanitized(redacted(text)), limit, keep_tail=True)
