"""The relay's published position: in memory, and saved (fenced) in ``awooop_relay_cursor``.

The cursor moves (in memory) after the XADDs succeeded. It is saved at most every
``CURSOR_SAVE_INTERVAL_S`` (and when a drain or a clean stop ends), not after every batch: at a
steady trickle each commit is its own batch, and that UPDATE was a third of the relay's
statements. A crash republishes what was published since the last save (at most that long):
duplicates, never loss.

The save is a compare-and-set on the previously saved position AND checks in the same statement
that this relay's term still holds an unexpired lease, so a relay that lost leadership (a
resumed frozen one, one cut off from Postgres) cannot move the cursor, let alone backwards; it
gets :class:`LeadershipLostError` and steps down.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from awooop.core.db import Connection
from awooop.core.errors import LeadershipLostError
from awooop.eventlog import eventlog
from awooop.eventlog.eventlog import Cursor, RecordedEvent

LEADERSHIP = "relay"  # the awooop_leaders row: one relay leader per database
CURSOR_NAME = "events"
# How stale the saved cursor may get while events flow: a crash republishes at most this much.
CURSOR_SAVE_INTERVAL_S = 0.25

# --- SQL -----------------------------------------------------------------------------------

LOAD_CURSOR = "SELECT tx_id, position FROM awooop_relay_cursor WHERE name = $1"
# Compare-and-set on the saved position, fenced by the leader's term (awooop/core/leadership.py):
# a relay whose lease ran out or was taken moves nothing.
ADVANCE_CURSOR = """
UPDATE awooop_relay_cursor
SET tx_id = $4, position = $5, published = published + $6, relay_attempts = relay_attempts + $8,
    leader = $7, updated_at = now()
WHERE name = $1 AND tx_id = $2 AND position = $3
  AND EXISTS (
    SELECT 1 FROM awooop_leaders
    WHERE name = $9 AND holder = $7 AND term = $10 AND lease_until > now()
    FOR SHARE
  )
"""
COUNT_FAILURE = """
UPDATE awooop_relay_cursor
SET relay_attempts = relay_attempts + 1, relay_failures = relay_failures + 1,
    last_error = $2, updated_at = now()
WHERE name = $1
"""


class RelayCursor:
    """Published up to ``position``; ``awooop_relay_cursor`` holds ``saved``."""

    def __init__(self, holder: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.holder = holder  # the relay id, written as the row's leader
        self.clock = clock  # when a save is due: a test sets its own, not the machine's pace
        self.position = Cursor()
        self.saved = Cursor()
        self._unsaved_events = 0
        self._unsaved_batches = 0
        self._save_due = 0.0

    async def load(self, conn: Connection) -> None:
        """Start from the saved position (a new term)."""
        row = await conn.fetchrow(LOAD_CURSOR, CURSOR_NAME)
        if row is None:
            raise RuntimeError("awooop_relay_cursor has no 'events' row: run awooop migrate")
        self.position = self.saved = Cursor(row["tx_id"], row["position"])
        self._unsaved_events = self._unsaved_batches = 0

    def advance(self, batch: Sequence[RecordedEvent]) -> None:
        """The batch is in Redis: move the position (saved later)."""
        self.position = eventlog.advance(self.position, batch)
        self._unsaved_events += len(batch)
        self._unsaved_batches += 1

    async def save_if_due(self, conn: Connection, term: int | None) -> None:
        now = self.clock()
        if self._unsaved_batches and now >= self._save_due:
            self._save_due = now + CURSOR_SAVE_INTERVAL_S
            await self.save(conn, term)

    async def save(self, conn: Connection, term: int | None) -> None:
        """Compare-and-set the saved cursor, fenced by the lease term; LeadershipLostError when
        another relay moved it or this relay's term no longer holds the lease."""
        if not self._unsaved_batches:
            return
        new = self.position
        status = await conn.execute(
            ADVANCE_CURSOR,
            CURSOR_NAME,
            self.saved.tx_id,
            self.saved.position,
            new.tx_id,
            new.position,
            self._unsaved_events,
            self.holder,
            self._unsaved_batches,
            LEADERSHIP,
            term,
        )
        if status != "UPDATE 1":
            raise LeadershipLostError(
                "the relay cursor save was refused: another relay moved the cursor or holds "
                "the lease",
                term=term,
            )
        self.saved = new
        self._unsaved_events = self._unsaved_batches = 0


async def count_failure(conn: Connection, exc: BaseException) -> None:
    """One failed attempt to relay events, on the cursor row (``relay_failures``)."""
    await conn.execute(COUNT_FAILURE, CURSOR_NAME, f"{type(exc).__name__}: {exc}")
