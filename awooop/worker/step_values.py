"""What a step's result becomes in the journal, and what a handler gets back (pure).

A step's result (``run.step``, ``run.wait_for_tool``) is journaled as JSON. The handler gets
the same value on the attempt that ran the step and on every attempt that replays it, because
both are read from that JSON (:func:`journal` encodes the result and decodes it again, the
replay decodes what was recorded: :func:`recorded`):

- without ``type=``: JSON builtins (dict, list, str, int, float, bool, None): a Struct, a
  dataclass or a pydantic model becomes a dict, a datetime an RFC 3339 string, a Decimal a
  string, bytes a base64 string, a tuple or a set a list, a number key a string key;
- with ``type=T``: a ``T``, decoded from that JSON the way ``msgspec.json.decode(type=T)``
  does: msgspec Structs, dataclasses, datetimes, dates, times, UUIDs, Decimals, bytes, enums,
  lists, tuples and dicts of those, and pydantic models when pydantic is installed (never
  imported here: an object is a pydantic model only if pydantic was imported by its author).

Refused before anything is recorded (the step's function ran; the error names the step and
the place in the value): a value JSON cannot hold (an object of an unsupported type, a float
NaN or infinity: E-DATA-001, ``UnstorableValueError``), a result larger than
``AWOOOP_STEP_RESULT_MAX_BYTES`` as JSON (E-DATA-002, ``StepResultTooLargeError``), and, with
``type=``, a value that does not decode into ``T`` (E-HANDLER-004, ``StepResultTypeError``).
A recorded result that no longer fits ``T`` (the type changed since) raises E-HANDLER-004 on
replay, naming the field. Text Postgres cannot store (``\\u0000``, lone surrogates) is refused
by :mod:`awooop.core.storable` (the write path's check, before the statement).
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
from collections.abc import Iterator
from typing import Any, TypeVar, cast

import msgspec

from awooop.core import storable
from awooop.core.config import STEP_RESULT_MAX_BYTES
from awooop.core.errors import StepResultTooLargeError, StepResultTypeError, UnstorableValueError

T = TypeVar("T")
ROOT = "result"  # the name of the value in paths: result.items[3].due
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_MSGSPEC_PATH = re.compile(r" - at `\$([^`]*)`$")


def _pydantic_model(value: object) -> bool:
    """Whether ``value`` is a pydantic model instance (False while pydantic is not imported)."""
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and isinstance(value, pydantic.BaseModel)


def _pydantic_class(type_: object) -> bool:
    pydantic = sys.modules.get("pydantic")
    return (
        pydantic is not None and isinstance(type_, type) and issubclass(type_, pydantic.BaseModel)
    )


def _pydantic_error(exc: BaseException | None) -> bool:
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and isinstance(exc, pydantic.ValidationError)


def _enc_hook(value: Any) -> Any:
    if _pydantic_model(value):
        return value.model_dump(mode="json")
    raise TypeError(f"Encoding objects of type {type(value).__name__} is unsupported")


def _dec_hook(type_: type[Any], value: Any) -> Any:
    if _pydantic_class(type_):
        return type_.model_validate(value)  # its ValidationError is a ValueError: msgspec's path
    raise TypeError(f"{type_!r} is no type a step result can have")


_encode = msgspec.json.Encoder(enc_hook=_enc_hook).encode
_decode_builtins = msgspec.json.Decoder().decode
_pack = msgspec.msgpack.Encoder(enc_hook=_enc_hook).encode
# A float NaN or infinity as msgpack writes every float: 0xcb, then IEEE 754 big-endian with
# every exponent bit set. Other bytes may match too (inside an integer, or a float's payload):
# a match only sends the value to the walk, which decides.
_NONFINITE = re.compile(rb"\xcb[\x7f\xff][\xf0-\xff]")


def _may_hold_nonfinite(value: Any) -> bool:
    """Pure: False when ``value`` holds no float NaN or infinity, found at C speed (msgpack
    keeps floats as they are, where JSON writes them as null); True when it may (or when
    msgpack cannot encode it): then :func:`_leaves` looks."""
    try:
        return _NONFINITE.search(_pack(value)) is not None
    except (TypeError, ValueError, OverflowError):
        return True


def journal(
    what: str, value: Any, type_: type[T] | None, max_bytes: int = STEP_RESULT_MAX_BYTES
) -> tuple[Any, T]:
    """``value`` as it is journaled (JSON builtins) and as the handler gets it back (a ``T``
    with ``type_``, else those builtins), or the error that refuses it (see the module doc).
    ``what`` names the step in errors (``step 'draft'``)."""
    try:
        data = _encode(value)
    except UnicodeEncodeError as exc:  # a lone surrogate: storable names where
        found = storable.problem(msgspec.to_builtins(value, enc_hook=_enc_hook), ROOT)
        reason = UnstorableValueError(found) if found is not None else exc
        raise storable.unstorable(f"{what} result", reason) from exc
    except (TypeError, ValueError, OverflowError) as exc:
        place, kind = _unencodable(value, exc)
        raise UnstorableValueError(
            storable.sanitized(f"{what}: {place}: {kind} is not storable as JSON")
        ) from exc
    if len(data) > max_bytes:
        raise StepResultTooLargeError(
            f"{what}: the result is {len(data):,} bytes as JSON, over the limit of "
            f"{max_bytes:,} (AWOOOP_STEP_RESULT_MAX_BYTES): store a large value elsewhere "
            "and journal a reference to it"
        )
    # JSON has no NaN or infinity: msgspec writes them as null. Most results hold a None, and
    # walking a value in Python costs 20-80 times encoding it: msgpack says first.
    if b"null" in data and _may_hold_nonfinite(value):
        for place, leaf in _leaves(value):
            if isinstance(leaf, float) and not math.isfinite(leaf):
                raise UnstorableValueError(f"{what}: {place}: float {leaf} is not storable as JSON")
    stored = _decode_builtins(data)
    if type_ is None:
        return stored, cast(T, stored)
    return stored, _decoded(what, data, type_, "the result")


def kept(stored: Any) -> bytes:
    """A journaled result (JSON builtins) as an attempt keeps it while it runs: its JSON, one
    bytes object instead of a tree of dicts and strings (an agent's steps accumulate)."""
    return _encode(stored)


def unkept(value: Any) -> Any:
    """A result as :func:`kept` keeps it (or JSON builtins, as a replay reads them) as JSON
    builtins again. JSON builtins are never bytes."""
    return _decode_builtins(value) if isinstance(value, bytes) else value


def recorded(what: str, stored: Any, type_: type[T] | None) -> T:
    """A result an earlier attempt journaled (JSON builtins), as the handler gets it."""
    if type_ is None:
        return cast(T, stored)
    return _decoded(what, _encode(stored), type_, "the recorded result")


def _decoded(what: str, data: bytes, type_: type[T], whose: str) -> T:
    try:
        return msgspec.json.decode(data, type=type_, dec_hook=_dec_hook)
    except msgspec.ValidationError as exc:
        found = _MSGSPEC_PATH.search(str(exc))
        place = ROOT + (found.group(1) if found else "")
        text = str(exc)[: found.start()] if found else str(exc)
        cause: Any = exc.__cause__
        if _pydantic_error(cause):  # a model's own error: its first field's
            first = cause.errors()[0]
            for part in first["loc"]:
                place = f"{place}[{part}]" if isinstance(part, int) else _key(place, part)
            text = first["msg"]
        text = f"{text} - at `{place}`"
        name = type_.__name__ if isinstance(type_, type) else repr(type_)
        raise StepResultTypeError(
            storable.sanitized(f"{what}: {whose} does not fit {name}: {text}")
        ) from exc


def _unencodable(value: Any, exc: BaseException) -> tuple[str, str]:
    """Where in ``value`` the first part JSON cannot hold is (a path from ``result``), and
    what it is: descends into the first child that does not encode alone."""
    place, current = ROOT, value
    while True:
        if isinstance(current, dict):
            for key in current:
                try:
                    _encode({key: None})
                except (TypeError, ValueError, OverflowError):
                    return f"{_key(place, key)} (a key)", f"{type(key).__name__} as a key"
        for sub_place, child in _children(place, current):
            try:
                _encode(child)
            except (TypeError, ValueError, OverflowError) as inner:
                place, current, exc = sub_place, child, inner
                break
        else:
            kind = type(current).__name__
            message = str(exc)
            return place, kind if "unsupported" in message else f"{kind} ({message})"


def _leaves(value: Any) -> Iterator[tuple[str, Any]]:
    """Every value inside ``value`` with its path, depth first, without recursion."""
    stack: list[tuple[str, Any]] = [(ROOT, value)]
    while stack:
        place, item = stack.pop()
        yield place, item
        stack.extend(reversed(list(_children(place, item))))


def _children(place: str, value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, str | bytes | bytearray | int | float | None):
        return
    if isinstance(value, dict):
        for key, sub in value.items():
            yield _key(place, key), sub
    elif isinstance(value, list | tuple | set | frozenset):
        for i, sub in enumerate(value):
            yield f"{place}[{i}]", sub
    elif isinstance(value, msgspec.Struct):
        for name in value.__struct_fields__:
            yield f"{place}.{name}", getattr(value, name)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            yield f"{place}.{field.name}", getattr(value, field.name)
    elif _pydantic_model(value):
        for name in type(value).model_fields:
            yield f"{place}.{name}", getattr(value, name)


def _key(place: str, key: object) -> str:
    if isinstance(key, str) and _IDENTIFIER.match(key):
        return f"{place}.{key}"
    shown = repr(key)
    if len(shown) > storable.EXCERPT_CHARS:
        shown = shown[: storable.EXCERPT_CHARS] + "..."
    return f"{place}[{shown}]"
