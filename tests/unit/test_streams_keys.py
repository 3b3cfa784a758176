"""Stream keys: one hash tag per shard, inverse functions (pure)."""

from __future__ import annotations

import pytest
from redis.crc import key_slot

from awooop.streams.keys import Keys, hash_tag, one_slot, shard_of

KEYS = Keys("aw", 4)


def test_every_key_of_a_shard_shares_its_hash_tag() -> None:
    for shard in KEYS.shards():
        tags = {
            hash_tag(key)
            for key in (
                KEYS.work_stream(shard),
                KEYS.events_stream(shard),
                KEYS.epoch(shard),
                KEYS.epoch_pending(shard),
            )
        }
        assert tags == {f"s{shard}"}
    assert hash_tag(KEYS.notices_stream()) == hash_tag(KEYS.notices_epoch()) == "notices"
    assert hash_tag("no-tag") == "no-tag"


def test_epoch_of_names_the_epoch_that_guards_a_stream() -> None:
    assert KEYS.epoch_of(KEYS.work_stream(2)) == KEYS.epoch(2)
    assert KEYS.epoch_of(KEYS.events_stream(3)) == KEYS.epoch(3)
    assert KEYS.epoch_of(KEYS.notices_stream()) == KEYS.notices_epoch()
    assert KEYS.stream_shard(KEYS.events_stream(1)) == 1


def test_shards_are_stable_and_in_range() -> None:
    assert shard_of("awoooi", 4) == shard_of("awoooi", 4) == KEYS.shard_of("awoooi")
    assert {shard_of(f"p{i}", 4) for i in range(100)} == {0, 1, 2, 3}
    with pytest.raises(ValueError, match="outside"):
        KEYS.work_stream(4)


def test_hash_tag_follows_the_redis_cluster_rule() -> None:
    assert hash_tag("a{b}c{d}") == "b"  # the first tag only
    assert hash_tag("a{}b{c}") == "a{}b{c}"  # an empty tag: the whole key is hashed
    assert hash_tag("a}b{c") == "a}b{c"  # no closing brace after the opening one
    for key in ("a{b}c{d}", "a{}b{c}", "a}b{c", KEYS.work_stream(3), KEYS.notices_epoch()):
        assert key_slot(hash_tag(key).encode()) == key_slot(key.encode())  # redis-py agrees


def test_a_script_key_set_must_stay_in_one_slot() -> None:
    one_slot([KEYS.epoch(1), KEYS.events_stream(1), KEYS.work_stream(1)])
    one_slot([KEYS.notices_epoch(), KEYS.notices_stream()])
    one_slot([])
    with pytest.raises(ValueError, match="one hash tag"):
        one_slot([KEYS.epoch(1), KEYS.work_stream(2)])
    with pytest.raises(ValueError, match="one hash tag"):
        one_slot([KEYS.epoch(0), KEYS.notices_stream()])
