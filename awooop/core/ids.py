"""Run ids: UUIDv7 (RFC 9562), time-ordered.

A run's id keys its row in awooop_run_state, its stream (``run-<id>``) in awooop_event_streams
and its events in the log's (stream_id, version) index. With random (v4) ids every new run and
every claim or completion writes into a random leaf of each of those indexes, so the pages a
write touches spread over the whole history and fall out of the cache as the log grows. With
ids that begin with the creation time the live runs' keys sit together at the right edge of
each index: the working set stays the recent pages, whatever the size of the log.
"""

from __future__ import annotations

import os
import time
import uuid


def uuid7(unix_ms: int | None = None) -> uuid.UUID:
    """48 bits of Unix time in milliseconds, the version (7), 74 random bits, the variant."""
    ms = time.time_ns() // 1_000_000 if unix_ms is None else unix_ms
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & (2**48 - 1)) << 80
    value |= 0x7 << 76
    value |= ((rand >> 62) & 0xFFF) << 64  # rand_a: 12 bits
    value |= 0b10 << 62  # the RFC 4122 variant
    value |= rand & (2**62 - 1)  # rand_b: 62 bits
    return uuid.UUID(int=value)


def new_run_id() -> uuid.UUID:
    return uuid7()
