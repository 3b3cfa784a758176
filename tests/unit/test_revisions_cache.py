"""The worker cache and its pure decisions (R-23, R-24)."""

from __future__ import annotations

import uuid

import pytest

from awooop.revisions.cache import (
    CacheEntry,
    RevisionCache,
    due_for_revalidation,
    group_by_project,
    notice_clears,
    pointer_matches,
    revalidation_interval,
)

KEY = ("p1", "policy_routing", "default")
R1, R2 = uuid.uuid4(), uuid.uuid4()


def entry(revision: uuid.UUID | None, at: float = 100.0) -> CacheEntry:
    return CacheEntry(
        body={"model": "m"}, revision_id=revision, body_hash="h", cached_at=at, validated_at=at
    )


def test_an_entry_is_used_only_while_the_pointer_names_its_revision() -> None:
    assert pointer_matches(entry(R1), R1)
    assert not pointer_matches(entry(R1), R2)
    assert not pointer_matches(entry(R1), None)  # deactivated: reload (default policy)
    assert pointer_matches(entry(None), None)  # "no active revision" is cached too
    assert not pointer_matches(None, R1)


def test_a_notice_clears_only_an_entry_of_another_revision() -> None:
    assert notice_clears(entry(R1), R2)
    assert not notice_clears(entry(R1), R1)
    assert notice_clears(entry(None), R1)
    assert not notice_clears(None, R1)


def test_revalidation_intervals_per_family() -> None:
    assert revalidation_interval("policy_routing", 30, 300) == 30
    assert revalidation_interval("channel_event", 30, 300) == 300
    assert revalidation_interval("other", 30, 300) == 30
    assert due_for_revalidation(entry(R1, at=100), now=130, interval_s=30)
    assert not due_for_revalidation(entry(R1, at=100), now=129.9, interval_s=30)


def test_a_notice_removes_the_stale_entry_and_keeps_a_current_one() -> None:
    cache = RevisionCache()
    assert cache.put(KEY, entry(R1), cache.stamp(KEY))
    assert not cache.on_notice(KEY, R1)
    assert cache.get(KEY) is not None
    assert cache.on_notice(KEY, R2)
    assert cache.get(KEY) is None


def test_a_load_that_started_before_a_notice_is_not_stored() -> None:
    cache = RevisionCache()
    stamp = cache.stamp(KEY)  # the load reads the DB ...
    cache.on_notice(KEY, R2)  # ... a notice arrives meanwhile ...
    assert not cache.put(KEY, entry(R1), stamp)  # ... so its (maybe older) answer is dropped
    assert cache.get(KEY) is None
    assert cache.put(KEY, entry(R2), cache.stamp(KEY))


def test_a_load_that_started_before_a_cache_drop_is_not_stored() -> None:
    cache = RevisionCache()
    other = ("p2", "channel_event", "telegram")
    cache.put(other, entry(R1), cache.stamp(other))
    stamp = cache.stamp(KEY)
    assert cache.clear() == 1
    assert len(cache) == 0
    assert not cache.put(KEY, entry(R1), stamp)


def test_drop_removes_only_the_revision_that_was_found_stale() -> None:
    cache = RevisionCache()
    cache.put(KEY, entry(R2), cache.stamp(KEY))
    assert not cache.drop(KEY, R1)  # re-validation looked at R1, but R2 was loaded since
    assert cache.drop(KEY, R2)
    assert KEY not in cache


def test_mark_validated_moves_validated_at_but_not_cached_at() -> None:
    cache = RevisionCache()
    cache.put(KEY, entry(R1, at=100), cache.stamp(KEY))
    cache.mark_validated(KEY, R1, 250)
    got = cache.get(KEY)
    assert got is not None and (got.cached_at, got.validated_at) == (100, 250)
    cache.mark_validated(KEY, R2, 300)  # another revision: no effect
    got = cache.get(KEY)
    assert got is not None and got.validated_at == 250


@pytest.mark.parametrize(("now", "expected"), [(120, []), (131, [KEY])])
def test_due_lists_entries_past_their_family_interval(now: float, expected: list[object]) -> None:
    cache = RevisionCache()
    cache.put(KEY, entry(R1, at=100), cache.stamp(KEY))
    events = ("p1", "channel_event", "telegram")
    cache.put(events, entry(R1, at=100), cache.stamp(events))
    assert cache.due(now, lambda f: revalidation_interval(f, 30, 300)) == expected


def test_group_by_project() -> None:
    keys = [("a", "f", "1"), ("b", "f", "2"), ("a", "g", "3")]
    assert group_by_project(keys) == {"a": [("f", "1"), ("g", "3")], "b": [("f", "2")]}
