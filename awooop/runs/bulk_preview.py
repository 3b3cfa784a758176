"""The preview of a bulk operation (:mod:`awooop.runs.bulk`, step 1): how many runs it would
change, per project and per failure code, and the first of them."""

from __future__ import annotations

from collections import Counter

import msgspec

from awooop.core.db import Connection
from awooop.core.errors import InvalidInputError
from awooop.eventlog.state import TERMINAL, RunStatus
from awooop.runs import listing, search

KINDS = ("retry", "cancel")
PREVIEW_SCAN = 100_000
PREVIEW_ROWS = listing.PAGE


class Preview(msgspec.Struct, frozen=True, kw_only=True):
    total: int
    by_project: dict[str, int]
    by_code: dict[str, int] = {}  # per failure code ("": none)
    runs: list[listing.RunRow] = []  # the first PREVIEW_ROWS runs, newest first
    exact: bool = True  # False: a blocked_on filter looked at PREVIEW_SCAN runs and stopped
    capped: bool = False  # the filter's search found more runs than it looks at


Decide = listing.Decide


def check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise InvalidInputError(f"bulk action {kind[:40]!r}: expected retry or cancel")
    return kind


def for_action(kind: str, f: listing.RunFilter) -> listing.RunFilter:
    """Pure: ``f`` narrowed to the statuses ``kind`` applies to."""
    among = (
        frozenset({RunStatus.FAILED})
        if kind == "retry"
        else frozenset(s for s in RunStatus if s not in TERMINAL)
    )
    return msgspec.structs.replace(f, among=among)


async def preview(
    conn: Connection, kind: str, f: listing.RunFilter, decide: Decide | None = None
) -> Preview:
    """How many runs ``kind`` would change under ``f``, per project (on ``conn``'s role)."""
    narrowed = for_action(check_kind(kind), f)
    if listing.statuses(narrowed) == []:
        return Preview(total=0, by_project={})
    found = await listing.searched(conn, narrowed)
    capped = found is not None and found.capped
    counts: Counter[str] = Counter()
    codes: Counter[str] = Counter()
    if narrowed.reason is None or decide is None:
        sql, names = listing.count_statement(narrowed)
        given = listing.values(narrowed, None, 0, found)
        for r in await conn.fetch(sql, *(given[n] for n in names)):
            counts[r["project_id"]] += int(r["runs"])
            codes[r["failure_code"] or ""] += int(r["runs"])
        first = await listing.rows(conn, narrowed, None, PREVIEW_ROWS, found)
        return _preview(counts, codes, first, capped=capped)
    shown: list[listing.RunRow] = []
    cursor: listing.Cursor | None = None
    scanned = 0
    while scanned < PREVIEW_SCAN:
        rows = await listing.rows(conn, narrowed, cursor, 1000, found)
        scanned += len(rows)
        blocked = await decide(conn, [r.run_id for r in rows]) if rows else {}
        for row in rows:
            b = blocked.get(row.run_id)
            if b is not None and b.reason is narrowed.reason:
                counts[row.project_id] += 1
                codes[row.failure_code or ""] += 1
                if len(shown) < PREVIEW_ROWS:
                    shown.append(row)
        if len(rows) < 1000:
            return _preview(counts, codes, shown, capped=capped)
        cursor = listing.Cursor(rows[-1].created_at, rows[-1].run_id)
    return _preview(counts, codes, shown, capped=capped, exact=False)


def check_bounded(found: Preview) -> Preview:
    """An operation is recorded only for a search that found every run it matches: batches
    search again, and of more than search.LIMIT matches each would see another part."""
    if found.capped:
        raise InvalidInputError(
            f"the search matches more than {search.LIMIT} runs: narrow it (or add filters) "
            "before acting on them"
        )
    return found


def _preview(
    counts: Counter[str],
    codes: Counter[str],
    runs: list[listing.RunRow],
    *,
    capped: bool,
    exact: bool = True,
) -> Preview:
    return Preview(
        total=sum(counts.values()),
        by_project=dict(sorted(counts.items())),
        by_code=dict(sorted(codes.items())),
        runs=runs,
        exact=exact,
        capped=capped,
    )
