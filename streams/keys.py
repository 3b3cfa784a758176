"""Every Redis key and consumer-group name in one place.

Keys are Redis-Cluster-safe: all keys of one shard share the hash tag ``{sN}``, so a pipeline
or script that touches the work, events and epoch keys of one shard stays in one
slot. Projects map to shards by a stable hash (CRC-32 of the project id, the same in every
process and Python version), so one project's events, and therefore each run's events, always
travel through one shard stream in order.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import msgspec

WORKER_GROUP = "workers"
PROJECTOR_GROUP_PREFIX = "projector:"
NOTICES_TAG = "notices"


def shard_of(project_id: str, shard_count: int) -> int:
    return zlib.crc32(project_id.encode()) % shard_count


def projector_group(projection: str) -> str:
    return PROJECTOR_GROUP_PREFIX + projection


class Keys(msgspec.Struct, frozen=True):
    prefix: str
    shard_count: int

    def shard_of(self, project_id: str) -> int:
        return shard_of(project_id, self.shard_count)

    def shards(self) -> range:
        return range(self.shard_count)

    def _shard_key(self, shard: int, name: str) -> str:
        if not 0 <= shard < self.shard_count:
            raise ValueError(f"shard {shard} outside 0..{self.shard_count - 1}")
        return f"{self.prefix}:{{s{shard}}}:{name}"

    def work_stream(self, shard: int) -> str:
        """Runs to execute (dispatch events only), read by the ``workers`` group."""
        return self._shard_key(shard, "work")

    def events_stream(self, shard: int) -> str:
        """Every event of the shard's projects, read by projector groups."""
        return self._shard_key(shard, "events")

    def epoch(self, shard: int) -> str:
        """A marker written with the shard's streams; missing means Redis lost its data."""
        return self._shard_key(shard, "epoch")

    def epoch_pending(self, shard: int) -> str:
        """The token of a reset in progress: the relay rebuilds the shard under this token
        and only then moves it to :meth:`epoch` (a crash or a second loss midway restarts it)."""
        return self._shard_key(shard, "epoch-pending")

    def notices_stream(self) -> str:
        """Contract invalidation notices, read by every worker with plain XREAD."""
        return f"{self.prefix}:{{{NOTICES_TAG}}}:stream"

    def notices_epoch(self) -> str:
        return f"{self.prefix}:{{{NOTICES_TAG}}}:epoch"

    def stream_shard(self, stream_key: str) -> int:
        """The shard of a work or events stream key (inverse of the builders above)."""
        tag = stream_key.split("{", 1)[1].split("}", 1)[0]
        return int(tag[1:])

    def epoch_of(self, stream_key: str) -> str:
        """The epoch key that marks the generation of ``stream_key`` (a shard or notices)."""
        if stream_key == self.notices_stream():
            return self.notices_epoch()
        return self.epoch(self.stream_shard(stream_key))


def hash_tag(key: str) -> str:
    """The part of a key Redis Cluster hashes: the ``{...}`` hash tag, or the whole key.

    Redis's rule: the text between the first ``{`` and the next ``}`` when it is non-empty;
    otherwise (no tag, or ``{}``) the whole key. Keys with equal results share a slot.
    """
    start = key.find("{")
    end = key.find("}", start + 1)
    if start < 0 or end < 0 or end == start + 1:
        return key
    return key[start + 1 : end]


def one_slot(keys: Sequence[str]) -> None:
    """Refuse a key set that Redis Cluster would refuse (CROSSSLOT): the keys of one script or
    transaction must share one hash tag. Checked on every script call, so a test on a single
    Redis already fails where a cluster would."""
    tags = {hash_tag(key) for key in keys}
    if len(tags) > 1:
        raise ValueError(f"keys of one script must share one hash tag (slot): {list(keys)}")
