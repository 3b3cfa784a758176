"""Pure: a ``$1``-style statement as psycopg (and Django's cursor) take it.

The producer's statements are written once, with asyncpg's ``$n`` parameters (the ``.sql``
files of :mod:`awooop.eventlog.queries` and the constants beside the code). psycopg names
parameters ``%(name)s`` and reads ``%`` as the start of one, so :func:`statement` doubles every
``%`` and writes ``$n`` as ``%(pn)s``: a parameter used several times (``$1`` is, in most of
them) stays one parameter, which psycopg sends once, as ``$1`` again.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

# $n, not inside an identifier (a$1) or a dollar quote's tag ($1$ never appears in them)
DOLLAR = re.compile(r"(?<![\w$])\$(\d+)(?![\w$])")


@functools.lru_cache(maxsize=512)
def converted(query: str) -> str:
    """``query`` with ``%`` doubled and each ``$n`` written ``%(pn)s``."""
    return DOLLAR.sub(r"%(p\1)s", query.replace("%", "%%"))


def statement(query: str, args: Sequence[Any]) -> tuple[str, dict[str, Any]]:
    """The query and its parameters by name (``p1`` is ``args[0]``)."""
    return converted(query), {f"p{i}": arg for i, arg in enumerate(args, start=1)}
