"""A run's approvals as the console shows them: each request with its draft (the payload the
handler asked the reviewer to look at) and each decision with its reason and edited payload
(:mod:`awooop.runs.approval_options`)."""

from __future__ import annotations

import uuid
from typing import Any, LiteralString

from awooop.core.db import Connection
from awooop.runs.listing import Approval

REVIEWS: LiteralString = """
SELECT name, attempt, reason, requested_at, expires_at, used_at, decision, actor, decided_by,
       payload, on_reject, on_expire, decision_reason, edited_payload
FROM awooop_approvals WHERE run_id = $1 ORDER BY requested_at
"""


class Review(Approval, frozen=True, kw_only=True):
    """An approval with what was asked and answered besides yes or no."""

    payload: Any = None  # the draft (None: none)
    on_reject: str = "fail"
    on_expire: str = "fail"
    decision_reason: str = ""
    edited_payload: Any = None  # as the reviewer edited it (None: not edited)


async def reviews_of(conn: Connection, run_id: uuid.UUID) -> list[Approval]:
    """The run's approvals, oldest request first, as :class:`Review` values."""
    return [Review(**dict(r.items())) for r in await conn.fetch(REVIEWS, run_id)]
