"""The depth cap of a concurrency key: intake refuses a submission whose key already has as
many runs queued as its limit allows (``depth_cap``), before it writes anything.

The cap bounds the backlog one key can build (a customer whose agent loops cannot queue
without end). It is read, not reserved: submissions of one key that arrive at the same
moment may pass it together by their own number. A duplicate submission of a run already
queued is refused as well while the key is full (the check comes before the dedupe).
"""

from __future__ import annotations

from collections import Counter

from awooop.core.errors import ConcurrencyDepthError
from awooop.core.querier import Querier
from awooop.eventlog import queries
from awooop.runs.concurrency_rules import Limit, RunKey

QUEUED_PER_KEY = queries.load("concurrency_queued")


def over_cap(cap: int, queued: dict[str, int], adding: Counter[str]) -> list[str]:
    """Pure: the keys that would have more than ``cap`` queued runs after ``adding``."""
    return sorted(k for k, n in adding.items() if queued.get(k, 0) + n > cap)


async def check_depth(conn: Querier, project_id: str, limit: Limit, keys: list[RunKey]) -> None:
    """Raise ConcurrencyDepthError (429) if a key of ``keys`` would pass the limit's cap."""
    if limit.depth_cap is None or not keys:
        return
    adding = Counter(k.key for k in keys)
    rows = await conn.fetch(QUEUED_PER_KEY, project_id, sorted(adding))
    full = over_cap(limit.depth_cap, {r["concurrency_key"]: r["queued"] for r in rows}, adding)
    if full:
        raise ConcurrencyDepthError(
            f"concurrency key {full[0]!r} has {limit.depth_cap} runs queued already",
            key=full[0],
            depth_cap=limit.depth_cap,
        )
