"""The relay's read-ahead: publishing committed events that the follower horizon holds back.

The relay's cursor follows the log below the horizon (the oldest transaction still running,
:mod:`awooop.eventlog.eventlog`), so a transaction held open by any login would hold every tenant's
dispatch back for as long as it stays open. When the cursor has caught up with the horizon and
something committed has waited above it for ``READ_AHEAD_AFTER_S``, the relay also reads the
committed rows after the cursor (:func:`awooop.eventlog.read_ahead.read_ahead`) and publishes them
at once: per-stream order holds (that module's docstring says why). What it published ahead is
remembered here (:class:`ReadAhead`), so that when the horizon passes those rows the cursor
skips them instead of publishing them twice. The cursor itself, its fenced save and the crash
rule are unchanged: a crash republishes everything after the saved cursor (duplicates, never
loss).

Each read-ahead after the first reads only rows of the transactions its previous snapshot saw in
progress or that started after it. The memory is bounded: at most ``limit`` events published
ahead and not yet passed by the cursor (``READ_AHEAD_MAX_EVENTS``). A read that would go beyond
publishes the part that fits (a prefix in follower order keeps per-stream order) and stops
reading ahead until the cursor has passed everything published ahead; the rest waits for the
horizon, as without the read-ahead (logged as ``relay_read_ahead_full``).

A shard rebuild (:mod:`awooop.streams.rebuild`) republishes the log up to the cursor and then
what was published ahead (:meth:`ReadAhead.positions_after`), so a Redis loss loses none of it.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import TYPE_CHECKING

import msgspec

from awooop.core import metrics
from awooop.core.db import Connection
from awooop.core.logs import get_logger
from awooop.eventlog.eventlog import Cursor, RecordedEvent
from awooop.eventlog.read_ahead import Snapshot, read_ahead
from awooop.streams.publish import by_shard
from awooop.streams.tracing import publish_spans

if TYPE_CHECKING:
    from awooop.streams.relay_shards import ShardPublisher

log = get_logger(__name__)

# Read ahead only once a committed event has waited this long above the horizon: most holds
# are short transactions committing (a few ms), which the cursor's own re-checks cover with one
# statement per wake-up; a transaction held open is worth the extra read.
READ_AHEAD_AFTER_S = 0.05
# Events published ahead of the cursor and remembered until the cursor passes them (about
# 100 bytes each): a transaction held open for hours behind heavy traffic stops the read-ahead
# here (the rest waits for the horizon) instead of growing the relay without bound.
READ_AHEAD_MAX_EVENTS = 100_000


def key(event: RecordedEvent) -> tuple[int, int]:
    return (event.tx_id, event.position)


def unpublished(batch: Sequence[RecordedEvent], published: set[int]) -> list[RecordedEvent]:
    """The events of ``batch`` not already published ahead (by position), in order."""
    if not published:
        return list(batch)
    return [e for e in batch if e.position not in published]


def fitting(rows: Sequence[RecordedEvent], room: int) -> tuple[list[RecordedEvent], bool]:
    """What of a read-ahead (read with ``room + 1`` as its limit) may be published, and whether
    that is all of it. A prefix in follower order is safe to publish: every earlier event of a
    stream comes before it in that order."""
    if len(rows) <= room:
        return list(rows), True
    return list(rows[:room]), False


class Ahead(msgspec.Struct, frozen=True):
    """One read-ahead: the events to publish, its snapshot, whether it read everything."""

    events: list[RecordedEvent]
    snapshot: Snapshot | None
    complete: bool


class ReadAhead:
    """What the relay published ahead of its cursor, and where its next read-ahead starts."""

    def __init__(self, limit: int = READ_AHEAD_MAX_EVENTS) -> None:
        self.limit = limit
        self.since: Snapshot | None = None  # the last read's snapshot (None: read everything)
        self.full = False  # the limit was reached: no read-ahead until the cursor passes all
        self._published: set[int] = set()  # positions published ahead, not yet passed
        self._order: list[tuple[int, int]] = []  # the same, as a heap of (tx_id, position)

    def __len__(self) -> int:
        return len(self._published)

    @property
    def published(self) -> set[int]:
        return self._published

    def reset(self) -> None:
        """A new leadership term: it starts from the saved cursor and publishes it all."""
        self.since = None
        self.full = False
        self._published.clear()
        self._order.clear()

    def idle(self) -> None:
        """Nothing is held back: the next hold starts with one full read of what follows the
        cursor (a small tail), not with an old snapshot's list of transactions."""
        if not self._published:
            self.since = None
            self.full = False

    def passed(self, cursor: Cursor) -> None:
        """The cursor moved to ``cursor``: forget what it passed."""
        bound = (cursor.tx_id, cursor.position)
        while self._order and self._order[0] <= bound:
            _, position = heapq.heappop(self._order)
            self._published.discard(position)
        if self.full and not self._published:
            self.since = None
            self.full = False
            log.info("relay_read_ahead_resumed", tx_id=cursor.tx_id, position=cursor.position)

    def positions_after(self, cursor: Cursor) -> list[int]:
        """Positions published ahead and after ``cursor``, in follower order."""
        bound = (cursor.tx_id, cursor.position)
        return [position for tx_id, position in sorted(self._order) if (tx_id, position) > bound]

    async def read(self, conn: Connection, cursor: Cursor) -> Ahead:
        """What to publish ahead of ``cursor`` now (nothing when the limit was reached). The
        caller publishes ``events`` in order and then calls :meth:`record`; a read whose
        publish failed changes nothing (the next one reads the same rows again)."""
        if self.full:
            return Ahead([], self.since, complete=True)
        room = self.limit - len(self._published)
        rows, snapshot = await read_ahead(conn, cursor, self.since, room + 1)
        events, complete = fitting(rows, room)
        return Ahead(unpublished(events, self._published), snapshot, complete)

    def unpublished(self, batch: Sequence[RecordedEvent]) -> list[RecordedEvent]:
        """The events of the cursor's ``batch`` not published ahead already."""
        return unpublished(batch, self._published)

    async def publish(
        self, conn: Connection, cursor: Cursor, shards: ShardPublisher, batch_size: int
    ) -> int:
        """Read ahead of ``cursor`` and publish what was read, in batches in log order, each
        entry marked with the cursor (``Envelope.ahead_of``); returns how many."""
        ahead = await self.read(conn, cursor)
        at = (cursor.tx_id, cursor.position)
        for start in range(0, len(ahead.events), batch_size):
            batch = ahead.events[start : start + batch_size]
            spans = publish_spans(batch, shards.keys)
            grouped = by_shard(batch, shards.keys, contexts=spans.contexts, ahead_of=at)
            try:
                await shards.publish_batch(conn, cursor, batch, grouped, may_rebuild=True)
            except BaseException as exc:
                spans.end(exc)
                raise
            spans.end()
            metrics.RELAY_PUBLISHED.labels("events").inc(len(batch))
            # Remembered batch by batch: a rebuild while the next batch goes out must send
            # these again before it.
            self.remember(batch)
        self.record(ahead)
        return len(ahead.events)

    def remember(self, events: Sequence[RecordedEvent]) -> None:
        """``events`` are in Redis: the cursor skips them, a shard rebuild sends them again."""
        for event in events:
            if event.position not in self._published:
                self._published.add(event.position)
                heapq.heappush(self._order, key(event))

    def record(self, ahead: Ahead) -> None:
        """All of ``ahead`` is in Redis: remember it, and read from its snapshot next (a read
        whose publish failed halfway is read again from the previous snapshot)."""
        self.remember(ahead.events)
        if ahead.complete:
            self.since = ahead.snapshot
        elif not self.full:
            self.full = True
            log.warning(
                "relay_read_ahead_full", published_ahead=len(self._published), limit=self.limit
            )
