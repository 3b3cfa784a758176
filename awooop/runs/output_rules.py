"""Streamed run output, the pure rules (docs/workers.md, Streamed output): how a worker
coalesces what a handler emits into rows, how the per-run limit cuts it, where a reader
resumes, and what a reader is told as it follows a run's log.

The log: each row is a chunk of one attempt's output with its place in the run's log (``seq``,
1, 2, ... over every attempt: the id of a server-sent event) and in the run's output (UTF-8
byte offsets ``offset`` to ``end``). A reader that resumes after ``seq`` N gets the rows after
N, each once and in order.

- **Coalescing** (:class:`Coalescer`): emitted text waits in the worker and is flushed as one
  row when ``flush_bytes`` wait, else at most every ``interval_s`` (the first emit of an
  attempt at once: the first token shows without delay), and whatever waits when the attempt
  ends. A row holds at most ``flush_bytes`` bytes, cut on a character boundary
  (:func:`split_utf8`); a larger emit becomes several rows.
- **The limit** (:func:`fit`): a run's output holds at most ``max_bytes`` (all its attempts
  together). The flush that reaches it keeps what fits (cut on a character boundary) and then
  writes a truncation marker (an empty row, ``truncated``); what the run emits later is
  dropped. Truncation, not an error: a long answer is cut, the run goes on.
- **Resuming** (:func:`resume_after`): ``Last-Event-ID`` (what a browser's EventSource sends
  when it reconnects) wins over ``?after=``; either is a row's ``seq`` (0: from the start).
- **Following** (:class:`Follow`): the reader is told the rows in order, that an attempt's
  output was abandoned (:class:`Abandoned`: a later attempt's row, or the run's attempt count,
  moved past it: the run went on in a later attempt, which runs the handler from the top), and
  the end (:class:`End`) once the run is finished and every row is told.
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from awooop.core.errors import InvalidInputError
from awooop.eventlog.state import TERMINAL, RunStatus

MAX_SEQ = 2**31 - 1  # seq is a Postgres integer


class Chunk(msgspec.Struct, frozen=True):
    """One row of a run's output log."""

    seq: int
    attempt: int
    offset: int  # UTF-8 bytes before it in the run's output
    end: int
    text: str
    at: datetime
    truncated: bool = False  # the marker row: the limit was reached here


class Page(msgspec.Struct, frozen=True):
    """One read of a run's log: the run's status and attempt count, and rows in order."""

    status: RunStatus
    attempt: int  # the run's attempt count
    rows: list[Chunk]
    before: Chunk | None = None  # the row the read resumed after (its attempt), when kept
    more: bool = False  # the read stopped at its row limit: more rows may follow now


class Abandoned(msgspec.Struct, frozen=True):
    """The output of ``attempt`` is abandoned: the run went on in attempt ``by``."""

    attempt: int
    by: int


class End(msgspec.Struct, frozen=True):
    """The run is finished (``status``) and every row of its output was told; rows of attempts
    other than ``attempt`` (its last) were abandoned."""

    status: str
    attempt: int


Item = Chunk | Abandoned | End


# --- the worker's side ----------------------------------------------------------------------


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def split_utf8(text: str, max_bytes: int) -> tuple[str, str]:
    """``text`` cut after at most ``max_bytes`` UTF-8 bytes, on a character boundary: the
    head and the rest. The head is empty only when ``max_bytes`` is below the first
    character's size."""
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text, ""
    cut = max(0, max_bytes)
    while cut > 0 and (data[cut] & 0xC0) == 0x80:  # a continuation byte: back to its start
        cut -= 1
    head = data[:cut].decode("utf-8")
    return head, text[len(head) :]


def fit(text: str, at: int, max_bytes: int) -> tuple[str, bool]:
    """What of ``text`` fits in a run's output that holds ``at`` bytes of at most
    ``max_bytes``: the part that fits, and whether the rest was cut (a marker is due)."""
    head, rest = split_utf8(text, max(0, max_bytes - at))
    return head, rest != ""


class Coalescer:
    """The text an attempt emitted that waits for its flush (times: ``time.monotonic()``)."""

    def __init__(self, *, interval_s: float, flush_bytes: int) -> None:
        self.interval_s = interval_s
        self.flush_bytes = flush_bytes
        self.pending: list[str] = []
        self.pending_bytes = 0
        self.last_flush: float | None = None  # None: nothing flushed yet (the first is at once)

    def add(self, text: str) -> None:
        if text:
            self.pending.append(text)
            self.pending_bytes += utf8_len(text)

    def due_in(self, now: float, *, urgent: bool = False) -> float | None:
        """Seconds until the next flush is due (0: now); None when nothing waits. ``urgent``:
        the attempt is ending (or asks for everything to be written): now."""
        if not self.pending:
            return None
        if urgent or self.pending_bytes >= self.flush_bytes or self.last_flush is None:
            return 0.0
        return max(0.0, self.last_flush + self.interval_s - now)

    def take(self, now: float) -> str:
        """The next row's text (at most ``flush_bytes`` bytes, in emit order), taken out."""
        head, rest = split_utf8("".join(self.pending), self.flush_bytes)
        if not head and rest:  # flush_bytes below one character: take that character whole
            head, rest = rest[0], rest[1:]
        self.pending = [rest] if rest else []
        self.pending_bytes = utf8_len(rest)
        self.last_flush = now
        return head

    def clear(self) -> None:
        self.pending, self.pending_bytes = [], 0


# --- the reader's side ----------------------------------------------------------------------


def resume_after(last_event_id: str | None, after: str | None) -> int:
    """Where a reader resumes: the ``seq`` of the last row it has (0: none). ``Last-Event-ID``
    (sent by a reconnecting EventSource) wins over ``?after=``; a value that is not a row's
    ``seq`` (digits, at most 2**31-1) is E-INPUT-001."""
    for name, value in (("Last-Event-ID", last_event_id), ("after", after)):
        if value is None or value.strip() == "":
            continue
        text = value.strip()
        if not text.isascii() or not text.isdigit() or len(text) > 10 or int(text) > MAX_SEQ:
            raise InvalidInputError(
                f"{name} {value[:40]!r}: the seq of an output chunk (a number from 0 to {MAX_SEQ})"
            )
        return int(text)
    return 0


class Follow:
    """A reader's position in one run's output log, and what it is told next."""

    def __init__(self, after: int = 0) -> None:
        self.position = after  # the seq of the last row told
        self.last_attempt: int | None = None  # the attempt of that row
        self.marked: int | None = None  # the last attempt told abandoned
        self.done = False

    def take(self, page: Page) -> list[Item]:
        """What to tell the reader of ``page`` (read from :attr:`position` on), in order."""
        items: list[Item] = []
        if self.last_attempt is None and page.before is not None:
            self.last_attempt = page.before.attempt
        for row in page.rows:
            if row.seq <= self.position:
                continue
            self._abandon(items, row.attempt)
            items.append(row)
            self.position, self.last_attempt = row.seq, row.attempt
        if page.more:
            return items
        self._abandon(items, page.attempt)
        if page.status in TERMINAL:
            items.append(End(status=page.status.value, attempt=page.attempt))
            self.done = True
        return items

    def _abandon(self, items: list[Item], attempt: int) -> None:
        last = self.last_attempt
        if last is not None and attempt > last and self.marked != last:
            items.append(Abandoned(attempt=last, by=attempt))
            self.marked = last
