"""psycopg's own adapters for what the producer passes and reads, installed on the producer's
cursors when the connection's are another's (the service's own loaders, Django's).

The producer passes text, numbers, booleans, UUIDs and lists of them, and reads text, numbers,
booleans, UUIDs and timestamps. A connection whose adapters for those types are the service's
own (a ``uuid`` loader that returns text, say) would give the producer values it does not
expect: :func:`differences` finds them (a few dictionary look-ups per call) and
:func:`install` registers psycopg's defaults on the producer's cursor only. A cursor's
adapters are a copy of its connection's, so the connection and the service's own cursors keep
theirs.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import pq
from psycopg.adapt import AdaptersMap, PyFormat

PASSED: tuple[type, ...] = (str, int, float, bool, uuid.UUID, list)
READ = ("text", "varchar", "name", "bool", "int2", "int4", "int8", "numeric", "float8", "uuid")
LOADED = [psycopg.adapters.types[name].oid for name in (*READ, "timestamptz")]
# The producer's parameters are %(name)s (psycopg's automatic format) and its results text.

Fix = tuple[str, Any, Any]  # ("dumper", class, dumper) or ("loader", oid, loader)


def _dumper(adapters: AdaptersMap, cls: type) -> Any:
    try:
        return adapters.get_dumper(cls, PyFormat.AUTO)
    except psycopg.ProgrammingError:
        return None


def differences(adapters: AdaptersMap) -> list[Fix]:
    """psycopg's default adapters that ``adapters`` (a connection's) replaced."""
    defaults = psycopg.adapters
    fixes: list[Fix] = []
    for cls in PASSED:
        default = _dumper(defaults, cls)
        if _dumper(adapters, cls) is not default:
            fixes.append(("dumper", cls, default))
    for oid in LOADED:
        default = defaults.get_loader(oid, pq.Format.TEXT)
        if adapters.get_loader(oid, pq.Format.TEXT) is not default:
            fixes.append(("loader", oid, default))
    return [f for f in fixes if f[2] is not None]


def install(cursor: Any, fixes: Sequence[Fix]) -> None:
    """psycopg's defaults on ``cursor`` (Django's cursor wraps psycopg's: ``.cursor``)."""
    if not fixes:
        return
    adapters: AdaptersMap = getattr(cursor, "cursor", cursor).adapters
    for kind, key, adapter in fixes:
        if kind == "dumper":
            adapters.register_dumper(key, adapter)
        else:
            adapters.register_loader(key, adapter)
