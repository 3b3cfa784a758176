"""Fair share between projects (flow control; migrations/0134_fair_share.sql).

Waiting runs are taken in start-time fair queueing order: intake gives each run a start tag
(``awooop_fair_start``: the virtual time, or the tag after its project's last waiting run,
whichever is later; runs of one batch are 1/weight apart), and workers take runs by tag:

- a claim from a work message defers a run when another project's run that could start now
  is more than one step ahead of it (``claim_many.sql``, a bounded probe); the worker then
  rings its polling path, which takes the waiting runs in tag order (``run_lock_fair.sql``,
  within a bounded window from the head, then oldest first past it);
- one project alone is never deferred (nobody is ahead of it): the fair order costs it one
  probe per claim batch and one at intake.

A project's weight (1 to 1000, default 1) sets its share while several projects have runs
waiting; only the platform role sets it (an admin token, ``awooop projects set P --weight N``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from awooop.core.db import Connection
from awooop.core.errors import InvalidInputError
from awooop.eventlog import queries
from awooop.runs.pause_rules import MAX_ACTOR, check_text

MIN_WEIGHT = 1
MAX_WEIGHT = 1000
DEFAULT_WEIGHT = 1
LIST_LIMIT = 1000

SET = queries.load("share_set")
LIST = queries.load("share_list")


class Share(msgspec.Struct, frozen=True):
    """A project's weight in the fair order, and who set it last (None: never set)."""

    project_id: str
    weight: int
    set_by: str | None = None
    set_at: datetime | None = None


def check_weight(weight: Any) -> int:
    """Pure: ``weight`` as a valid weight, or the coded refusal."""
    if isinstance(weight, bool) or not isinstance(weight, int):
        raise InvalidInputError("a project's weight is an integer", field="weight")
    if not MIN_WEIGHT <= weight <= MAX_WEIGHT:
        raise InvalidInputError(
            f"a project's weight is from {MIN_WEIGHT} to {MAX_WEIGHT}, not {weight}",
            field="weight",
        )
    return weight


def _share(row: Any) -> Share:
    return Share(row["project_id"], row["share_weight"], row["share_set_by"], row["share_set_at"])


async def set_share(conn: Connection, project_id: str, weight: int, *, actor: str) -> Share:
    """Set ``project_id``'s weight (platform role); it applies to runs submitted from now on."""
    weight = check_weight(weight)
    check_text("actor", actor, MAX_ACTOR, empty=False)
    return _share(await conn.fetchrow(SET, project_id, weight, actor))


async def shares(conn: Connection, project_id: str | None = None) -> list[Share]:
    """The share of ``project_id`` (the default when it was never set), or every project whose
    weight was ever set (platform role)."""
    found = [_share(r) for r in await conn.fetch(LIST, project_id, LIST_LIMIT)]
    if project_id is not None and not found:
        return [Share(project_id, DEFAULT_WEIGHT)]
    return found
