"""The worker-side reader of the contract notice stream (R-22, R-23, R-25).

Every worker must see every notice, so this is a plain ``XREAD`` from the reader's own last
id, not a consumer group. A reader that was away (Redis down, process paused) resumes from its
last id and catches up on what it missed, as far as the stream still holds it.

Redis may lose the stream (restart without persistence, flush). A reader cannot tell which
notices it missed then, so it drops its WHOLE cache (the next use reloads through the pointer
check, which is the authority anyway). It detects the loss, before every read, by:
- the notices epoch key (written by the relay with the stream) having changed or vanished;
- its last id being beyond the stream's last-generated-id, or the stream having vanished
  after the reader had read from it.
After a reset it continues from the new stream's last-generated-id: any notice older than
that belongs to an activation that committed before the cache was dropped, and every entry
loaded after the drop reads the pointer after that commit.

The reader is driven by :meth:`NoticeReader.poll` (one GET/XINFO pipeline, then one blocking
XREAD); the gateway runs it as a loop of the loop framework
(:mod:`awooop.core.loops`), so Redis errors are logged, counted and retried with
back-off while the pointer check keeps workers correct without notices.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from redis.exceptions import ResponseError

from awooop.core.logs import get_logger
from awooop.streams.envelope import FIELD, Notice, decode_notice
from awooop.streams.keys import Keys

log = get_logger(__name__)

BLOCK_MS = 1000  # bounds how long a reset goes unnoticed when no notice arrives
BATCH = 256
START = "0-0"

NoticeHandler = Callable[[Notice], Awaitable[None]]
ResetHandler = Callable[[str], Awaitable[None]]
Observer = Callable[[Notice, float], None]


# --- pure decisions ---------------------------------------------------------------------------


def parse_id(stream_id: str | bytes) -> tuple[int, int]:
    text = stream_id.decode() if isinstance(stream_id, bytes) else stream_id
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


def reset_reason(
    known_epoch: bytes | None,
    epoch: bytes | None,
    last_id: str,
    last_generated_id: str | None,
) -> str | None:
    """Why the stream must be considered lost (and the cache dropped), or None.

    ``last_generated_id`` None means the stream does not exist."""
    if epoch != known_epoch:
        return "epoch_missing" if epoch is None else "epoch_changed"
    if last_generated_id is None:
        return None if last_id == START else "stream_missing"
    if parse_id(last_id) > parse_id(last_generated_id):
        return "id_beyond_stream"
    return None


# --- the reader ------------------------------------------------------------------------------


class NoticeReader:
    def __init__(
        self,
        redis: Any,
        keys: Keys,
        on_notice: NoticeHandler,
        on_reset: ResetHandler,
        *,
        block_ms: int = BLOCK_MS,
        observer: Observer | None = None,
    ) -> None:
        self.redis = redis
        self.stream = keys.notices_stream()
        self.epoch_key = keys.notices_epoch()
        self.on_notice = on_notice
        self.on_reset = on_reset
        self.block_ms = block_ms
        self.observer = observer
        self.last_id = START
        self.epoch: bytes | None = None
        self.primed = False
        self.notices_seen = 0
        self.resets = 0

    async def _state(self) -> tuple[bytes | None, str | None]:
        """(epoch, last-generated-id or None when the stream does not exist), one round trip."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.get(self.epoch_key)
            pipe.xinfo_stream(self.stream)
            epoch, info = await pipe.execute(raise_on_error=False)
        if isinstance(epoch, Exception):
            raise epoch
        if isinstance(info, ResponseError):
            return epoch, None  # "no such key"
        if isinstance(info, Exception):
            raise info
        last = info.get("last-generated-id", info.get(b"last-generated-id"))
        return epoch, (last.decode() if isinstance(last, bytes) else str(last))

    async def prime(self) -> None:
        """Start at the stream's current end: a fresh cache has nothing older to clear."""
        self.epoch, last_generated = await self._state()
        self.last_id = last_generated or START
        self.primed = True

    async def poll(self) -> int:
        """Check for a reset, then read (blocking up to ``block_ms``); the notices handled."""
        if not self.primed:
            await self.prime()
        epoch, last_generated = await self._state()
        reason = reset_reason(self.epoch, epoch, self.last_id, last_generated)
        if reason is not None:
            self.resets += 1
            log.warning("notice_stream_reset", reason=reason, last_id=self.last_id)
            self.epoch = epoch
            self.last_id = last_generated or START
            await self.on_reset(reason)
        response = await self.redis.xread(
            {self.stream: self.last_id}, count=BATCH, block=self.block_ms
        )
        handled = 0
        for _stream, entries in response or []:
            for entry_id, fields in entries:
                self.last_id = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
                raw = fields.get(FIELD, fields.get(FIELD.decode()))
                try:
                    notice = decode_notice(raw)
                except (msgspec.DecodeError, msgspec.ValidationError, TypeError):
                    log.error("notice_undecodable", entry_id=self.last_id)
                    continue
                await self.on_notice(notice)
                handled += 1
                self.notices_seen += 1
                if self.observer is not None:
                    self.observer(notice, time.time())
        return handled
