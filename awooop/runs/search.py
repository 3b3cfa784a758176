"""Searching runs: the run list's ``search`` filter (console, ``awooop runs list --search``,
the management API's runs list) and bulk operations by filter.

A search term matches a run whose id starts with it (hex digits, dashes ignored), whose
idempotency key starts with it, or whose input, result or failure reason contains it (case
ignored; the input and result as their JSON text). Each of the three is an indexed read
(migration 0128) of at most :data:`LIMIT` run ids:

- id prefix: a range of the primary key (``BETWEEN`` on uuids is leakproof, so an index
  condition under row-level security as well);
- key prefix: a byte-order range (``~>=~``/``~<~``, leakproof) on the key's
  ``text_pattern_ops`` index;
- text: ``awooop_search_runs()``, a SECURITY DEFINER function that runs the ILIKE through the
  trigram index (ILIKE is not leakproof: under row-level security Postgres would not use the
  index) and confines itself to the caller's tenant scope as the policy would.

The page is then read under row-level security as usual, among those ids
(``run_id = ANY(...)``, primary-key probes) with the list's other filters, newest first.
When a kind finds more than :data:`LIMIT` runs the search is :attr:`Found.capped`: the page
shows the newest among the runs found, and says to narrow the search.
"""

from __future__ import annotations

import re
import uuid

import msgspec

from awooop.core.db import Connection
from awooop.core.errors import InvalidInputError

MIN_LENGTH = 3
MAX_LENGTH = 200
LIMIT = 1000  # run ids per kind of match
HEX = re.compile(r"[0-9a-f-]+")
MAX_CODE = 20
CODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")

# --- SQL -------------------------------------------------------------------------------------
# $4: the statuses the filter allows (NULL: any), so that the limit counts only those.
BY_ID_PREFIX = """
SELECT run_id FROM awooop_run_state
WHERE run_id BETWEEN $1 AND $2 AND ($4::text[] IS NULL OR status = ANY($4)) LIMIT $3
"""
BY_KEY_PREFIX = """
SELECT run_id FROM awooop_run_state
WHERE provider_event_id ~>=~ $1 AND provider_event_id ~<~ $2
  AND ($4::text[] IS NULL OR status = ANY($4))
LIMIT $3
"""
BY_TEXT = "SELECT awooop_search_runs($1, $4, $2, $3) AS run_id"
# ---------------------------------------------------------------------------------------------


class Term(msgspec.Struct, frozen=True, kw_only=True):
    text: str
    id_range: tuple[uuid.UUID, uuid.UUID] | None  # the run ids that start with the hex digits
    key_range: tuple[str, str] | None  # [from, to) in byte order: keys that start with text
    pattern: str  # ILIKE pattern: contains text, wildcards escaped


class Found(msgspec.Struct, frozen=True, kw_only=True):
    run_ids: list[uuid.UUID]
    capped: bool  # a kind of match found more than LIMIT runs: the rest are not looked at


# --- pure ------------------------------------------------------------------------------------


def check_search(text: str) -> str:
    """The search term, trimmed; E-INPUT-001 when too short or too long."""
    term = text.strip()
    if len(term) < MIN_LENGTH:
        raise InvalidInputError(f"search {term[:40]!r}: at least {MIN_LENGTH} characters")
    if len(term) > MAX_LENGTH:
        raise InvalidInputError(f"search: at most {MAX_LENGTH} characters")
    if any(ord(c) < 32 for c in term):
        raise InvalidInputError("search: no control characters")
    return term


def escape_like(text: str) -> str:
    """Pure: ``text`` as a literal in a LIKE pattern (backslash is the default escape)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def id_range(text: str) -> tuple[uuid.UUID, uuid.UUID] | None:
    """Pure: the run ids starting with ``text`` (hex digits, dashes ignored); None when
    ``text`` is not the start of a run id."""
    lowered = text.lower()
    if not HEX.fullmatch(lowered):
        return None
    digits = lowered.replace("-", "")
    if not digits or len(digits) > 32:
        return None
    return uuid.UUID(digits.ljust(32, "0")), uuid.UUID(digits.ljust(32, "f"))


def key_upper(text: str) -> str | None:
    """Pure: the smallest string above every string that starts with ``text`` in byte order
    (UTF-8 keeps code point order); None when there is none."""
    chars = list(text)
    while chars:
        code = ord(chars.pop()) + 1
        if 0xD800 <= code <= 0xDFFF:  # surrogates are no characters
            code = 0xE000
        if code <= 0x10FFFF:
            return "".join(chars) + chr(code)
    return None


def classify(text: str) -> Term:
    """Pure: what a (checked) search term matches."""
    upper = key_upper(text)
    return Term(
        text=text,
        id_range=id_range(text),
        key_range=None if upper is None else (text, upper),
        pattern=f"%{escape_like(text)}%",
    )


def check_codes(text: str) -> tuple[str, ...]:
    """Pure: failure codes, comma-separated (``E-RUN-004,E-RUN-005``), checked and sorted."""
    codes = sorted({c.strip() for c in text.split(",") if c.strip()})
    if len(codes) > MAX_CODE:
        raise InvalidInputError(f"exclude_codes: at most {MAX_CODE} failure codes")
    for code in codes:
        if not CODE.fullmatch(code):
            raise InvalidInputError(f"exclude_codes {code[:40]!r}: not a failure code")
    return tuple(codes)


# --- I/O -------------------------------------------------------------------------------------


async def find(
    conn: Connection, text: str, project: str | None, statuses: list[str] | None = None
) -> Found:
    """The runs ``text`` matches (see the module docstring), at most LIMIT of each kind, on
    ``conn``'s role: a tenant finds its project's runs only. ``project``: the filter's project
    (None: the caller's whole scope); ``statuses``: those the filter allows (None: any)."""
    term = classify(text)
    found: dict[uuid.UUID, None] = {}
    capped = False
    batches: list[list[uuid.UUID]] = []
    if term.id_range is not None:
        low, high = term.id_range
        rows = await conn.fetch(BY_ID_PREFIX, low, high, LIMIT + 1, statuses)
        batches.append([r[0] for r in rows])
    if term.key_range is not None:
        low_key, high_key = term.key_range
        rows = await conn.fetch(BY_KEY_PREFIX, low_key, high_key, LIMIT + 1, statuses)
        batches.append([r[0] for r in rows])
    rows = await conn.fetch(BY_TEXT, project, term.pattern, LIMIT + 1, statuses)
    batches.append([r[0] for r in rows])
    for batch in batches:
        capped = capped or len(batch) > LIMIT
        found.update(dict.fromkeys(batch[:LIMIT]))
    return Found(run_ids=list(found), capped=capped)
