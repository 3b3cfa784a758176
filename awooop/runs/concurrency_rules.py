"""Concurrency keys: the small expression language of a limit and the run's key, pure.

A limit (``awooop_concurrency_limits``, one per contract or channel of a project) has a key
expression and a maximum expression, evaluated once per run at intake over ``project``,
``channel`` and ``input``; the run row keeps the outcome (:func:`run_key`). The language is
parsed here, never ``eval``-ed:

- values: ``"text"`` or ``'text'``, integers, ``true``, ``false``, ``null``; names
  ``project``, ``channel``, ``input``, then fields ``.name`` or ``["name"]`` or ``[0]``;
- ``a ?? b`` (``b`` where ``a`` is null), ``c ? a : b``, ``||``, ``&&``, ``!``,
  ``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, parentheses.

A field that is missing (or a field of something that is not an object) is ``null``, never an
error. The key is the value as text (``null`` becomes :data:`NO_KEY`, so every run without the
field shares one key); a maximum that is not an integer from 1 to :data:`MAX_LIMIT` counts
as 1. Examples: key ``input.customer_id``, maximum ``input.tier == "premium" ? 10 : 1``.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from typing import Any

import msgspec

from awooop.core.errors import InvalidInputError

NO_KEY = "(none)"
MAX_LIMIT = 10_000
MAX_KEY_CHARS = 200
NAMES = ("project", "channel", "input")

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<num>-?\d+)
    | (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    | (?P<op>\?\?|==|!=|<=|>=|&&|\|\||[?:!<>().\[\]])
    | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.VERBOSE,
)

Node = tuple[Any, ...]


@dataclass(frozen=True)
class Limit:
    """A limit as stored: its scope (``contract:<id>`` or ``channel:<type>``), expressions,
    optional global maximum and queued-depth cap."""

    scope: str
    key_expr: str
    max_expr: str
    global_max: int | None = None
    depth_cap: int | None = None


@dataclass(frozen=True)
class RunKey:
    scope: str
    key: str
    max: int


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise InvalidInputError(f"concurrency expression: unexpected {text[pos : pos + 10]!r}")
        kind = match.lastgroup or ""
        out.append((kind, match.group(kind)))
        pos = match.end()
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.pos = 0

    def peek(self) -> str | None:
        if self.pos < len(self.tokens):
            kind, value = self.tokens[self.pos]
            return value if kind == "op" else None
        return None

    def take(self, op: str) -> bool:
        if self.peek() == op:
            self.pos += 1
            return True
        return False

    def expect(self, op: str) -> None:
        if not self.take(op):
            raise InvalidInputError(f"concurrency expression: expected {op!r}")

    def parse(self) -> Node:
        node = self.ternary()
        if self.pos != len(self.tokens):
            raise InvalidInputError("concurrency expression: unexpected text after the expression")
        return node

    def ternary(self) -> Node:
        cond = self.binary(0)
        if self.take("?"):
            yes = self.ternary()
            self.expect(":")
            return ("if", cond, yes, self.ternary())
        return cond

    LEVELS: tuple[tuple[str, ...], ...] = (
        ("??",),
        ("||",),
        ("&&",),
        ("==", "!=", "<", "<=", ">", ">="),
    )

    def binary(self, level: int) -> Node:
        if level == len(self.LEVELS):
            return self.unary()
        node = self.binary(level + 1)
        while (op := self.peek()) in self.LEVELS[level]:
            self.pos += 1
            node = (op, node, self.binary(level + 1))
        return node

    def unary(self) -> Node:
        if self.take("!"):
            return ("!", self.unary())
        return self.primary()

    def primary(self) -> Node:
        if self.take("("):
            node = self.ternary()
            self.expect(")")
            return node
        if self.pos >= len(self.tokens):
            raise InvalidInputError("concurrency expression: ends too early")
        kind, value = self.tokens[self.pos]
        self.pos += 1
        if kind == "num":
            return ("lit", int(value))
        if kind == "str":
            return ("lit", msgspec.json.decode(_as_json_string(value)))
        if kind == "name":
            literals: dict[str, Any] = {"true": True, "false": False, "null": None}
            if value in literals:
                return ("lit", literals[value])
            if value not in NAMES:
                raise InvalidInputError(f"concurrency expression: unknown name {value!r}")
            return self.fields(("var", value))
        raise InvalidInputError(f"concurrency expression: unexpected {value!r}")

    def fields(self, node: Node) -> Node:
        while True:
            if self.take("."):
                kind, value = self.tokens[self.pos] if self.pos < len(self.tokens) else ("", "")
                if kind != "name":
                    raise InvalidInputError("concurrency expression: a field name after '.'")
                self.pos += 1
                node = ("get", node, value)
            elif self.take("["):
                index = self.ternary()
                self.expect("]")
                node = ("getx", node, index)
            else:
                return node


def _as_json_string(token: str) -> bytes:
    body = token[1:-1]
    if token[0] == "'":
        body = body.replace("\\'", "'").replace('"', '\\"')
    return ('"' + body + '"').encode()


@functools.lru_cache(maxsize=256)
def parse(text: str) -> Node:
    """The expression's tree; InvalidInputError (E-INPUT-001) naming what is wrong."""
    return _Parser(text).parse()


def _field(container: Any, name: Any) -> Any:
    if isinstance(container, dict) and isinstance(name, str):
        return container.get(name)
    if isinstance(container, list) and isinstance(name, int) and not isinstance(name, bool):
        return container[name] if -len(container) <= name < len(container) else None
    return None


def _compare(op: str, a: Any, b: Any) -> bool:
    if op == "==":
        return bool(a == b and type(a) is type(b))
    if op == "!=":
        return not (a == b and type(a) is type(b))
    both_numbers = all(isinstance(v, int) and not isinstance(v, bool) for v in (a, b))
    if not (both_numbers or (isinstance(a, str) and isinstance(b, str))):
        return False
    results = {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}
    return bool(results[op])


def evaluate(node: Node, names: dict[str, Any]) -> Any:
    """The value of a parsed expression over ``names`` (project, channel, input)."""
    op = node[0]
    if op == "lit":
        return node[1]
    if op == "var":
        return names.get(node[1])
    if op == "get":
        return _field(evaluate(node[1], names), node[2])
    if op == "getx":
        return _field(evaluate(node[1], names), evaluate(node[2], names))
    if op == "if":
        return evaluate(node[2] if evaluate(node[1], names) is True else node[3], names)
    if op == "!":
        return evaluate(node[1], names) is not True
    if op == "??":
        left = evaluate(node[1], names)
        return evaluate(node[2], names) if left is None else left
    if op == "&&":
        return evaluate(node[1], names) is True and evaluate(node[2], names) is True
    if op == "||":
        return evaluate(node[1], names) is True or evaluate(node[2], names) is True
    return _compare(op, evaluate(node[1], names), evaluate(node[2], names))


def key_text(value: Any) -> str:
    """A key value as text: strings as they are, null as NO_KEY, anything else as JSON; a key
    longer than MAX_KEY_CHARS is shortened to its head and a digest."""
    if value is None:
        text = NO_KEY
    elif isinstance(value, str):
        text = value
    else:
        text = msgspec.json.encode(value, order="sorted").decode()
    if len(text) > MAX_KEY_CHARS:
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        text = text[: MAX_KEY_CHARS - 17] + "~" + digest
    return text


def limit_value(value: Any) -> int:
    """A maximum: an integer from 1 to MAX_LIMIT, anything else 1."""
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_LIMIT:
        return value
    return 1


def check_limit(limit: Limit) -> Limit:
    """The limit if both expressions parse and the numbers are sane, else InvalidInputError."""
    parse(limit.key_expr)
    parse(limit.max_expr)
    for name in ("global_max", "depth_cap"):
        value = getattr(limit, name)
        if value is not None and not 1 <= value <= 1_000_000:
            raise InvalidInputError(f"{name} must be from 1 to 1000000")
    return limit


def run_key(limit: Limit, project_id: str, channel_type: str, input_: Any) -> RunKey:
    """The run's key and the key's maximum under ``limit`` (computed once, at intake)."""
    names = {"project": project_id, "channel": channel_type, "input": input_}
    key = key_text(evaluate(parse(limit.key_expr), names))
    return RunKey(
        limit.scope, f"{limit.scope}/{key}", limit_value(evaluate(parse(limit.max_expr), names))
    )
