"""The ingest config cache: entries age out, the oldest go first, 0 turns it off."""

from __future__ import annotations

from awooop.ingest.cache import ConfigCache
from awooop.ingest.common import StoredCredential
from awooop.ingest.ingest_write import ChannelConfig

CONFIG = ChannelConfig(
    credential=StoredCredential(secret="s"),
    dedupe_ttl_s=60.0,
    max_attempts=3,
)
KEY = ("p1", "line", "default", None)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_entry_lives_for_the_ttl() -> None:
    clock = Clock()
    cache = ConfigCache(2.0, clock)
    cache.put(KEY, CONFIG)
    clock.now += 1.9
    assert cache.get(KEY) is CONFIG
    clock.now += 0.1
    assert cache.get(KEY) is None


def test_zero_turns_the_cache_off() -> None:
    cache = ConfigCache(0.0, Clock())
    cache.put(KEY, CONFIG)
    assert cache.get(KEY) is None


def test_the_oldest_entries_make_room_and_drop_removes() -> None:
    cache = ConfigCache(60.0, Clock(), size=2)
    keys = [("p1", "api", "default", f"t{i}") for i in range(3)]
    for key in keys:
        cache.put(key, CONFIG)
    assert [cache.get(k) for k in keys] == [None, CONFIG, CONFIG]
    cache.drop(keys[1])
    assert cache.get(keys[1]) is None
