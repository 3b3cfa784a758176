"""The worker's revision cache (R-23) and the pure decisions around it.

An entry is ``(body, revision_id, body_hash, cached_at)`` plus ``validated_at`` (when the DB
pointer last confirmed it). ``revision_id`` None means "the contract has no active revision"
(the default policy applies), which is cached and checked like any other revision.

A load that read the database before a notice (or a whole-cache drop) arrived must not put
its older result back afterwards: :meth:`RevisionCache.stamp` is taken before the read and
:meth:`RevisionCache.put` refuses the entry when a notice or a drop touched the key since.
(The pointer check before every LLM call would correct such an entry on the next call anyway;
the stamp keeps "a notice clears the entry" true without exceptions.)
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import msgspec

from awooop.revisions.body import CHANNEL_EVENT_FAMILY, POLICY_FAMILY

Key = tuple[str, str, str]  # (project_id, contract_family, contract_id)


class CacheEntry(msgspec.Struct, frozen=True, kw_only=True):
    body: Any
    revision_id: uuid.UUID | None
    body_hash: str | None
    cached_at: float
    validated_at: float


class Stamp(msgspec.Struct, frozen=True):
    epoch: int
    generation: int


# --- pure decisions ---------------------------------------------------------------------------


def pointer_matches(entry: CacheEntry | None, active: uuid.UUID | None) -> bool:
    """A cached entry may be used only while the DB pointer names its revision (R-24)."""
    return entry is not None and entry.revision_id == active


def notice_clears(entry: CacheEntry | None, new_revision_id: uuid.UUID) -> bool:
    """A notice whose revision differs from the cached one clears the entry (R-23)."""
    return entry is not None and entry.revision_id != new_revision_id


def revalidation_interval(
    family: str, policy_revalidate_s: float, channel_event_revalidate_s: float
) -> float:
    """30 s for policy_routing, 5 min for channel_event (configurable); other families are
    treated like policies (the shorter, safer bound)."""
    if family == CHANNEL_EVENT_FAMILY:
        return channel_event_revalidate_s
    if family == POLICY_FAMILY:
        return policy_revalidate_s
    return min(policy_revalidate_s, channel_event_revalidate_s)


def due_for_revalidation(entry: CacheEntry, now: float, interval_s: float) -> bool:
    return now - entry.validated_at >= interval_s


# --- the cache --------------------------------------------------------------------------------


class RevisionCache:
    """In-process cache of one worker (one gateway). Not shared between workers by design."""

    def __init__(self) -> None:
        self._entries: dict[Key, CacheEntry] = {}
        self._generations: dict[Key, int] = {}
        self._epoch = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Key) -> bool:
        return key in self._entries

    def get(self, key: Key) -> CacheEntry | None:
        return self._entries.get(key)

    def __iter__(self) -> Iterator[Key]:
        return iter(list(self._entries))

    def stamp(self, key: Key) -> Stamp:
        return Stamp(self._epoch, self._generations.get(key, 0))

    def put(self, key: Key, entry: CacheEntry, stamp: Stamp) -> bool:
        """Store ``entry`` unless a notice or a drop touched ``key`` after ``stamp``."""
        if stamp != self.stamp(key):
            return False
        self._entries[key] = entry
        return True

    def mark_validated(self, key: Key, revision_id: uuid.UUID | None, at: float) -> None:
        entry = self._entries.get(key)
        if entry is not None and entry.revision_id == revision_id:
            self._entries[key] = msgspec.structs.replace(entry, validated_at=at)

    def on_notice(self, key: Key, new_revision_id: uuid.UUID) -> bool:
        """Apply a notice; True when it cleared a (stale) entry."""
        self._generations[key] = self._generations.get(key, 0) + 1
        if notice_clears(self._entries.get(key), new_revision_id):
            del self._entries[key]
            return True
        return False

    def drop(self, key: Key, revision_id: uuid.UUID | None) -> bool:
        """Remove the entry if it still holds ``revision_id`` (re-validation found it stale)."""
        entry = self._entries.get(key)
        if entry is None or entry.revision_id != revision_id:
            return False
        del self._entries[key]
        self._generations[key] = self._generations.get(key, 0) + 1
        return True

    def clear(self) -> int:
        """Drop every entry (the notice stream was reset: notices may have been lost)."""
        dropped = len(self._entries)
        self._entries.clear()
        self._generations.clear()
        self._epoch += 1
        return dropped

    def due(self, now: float, interval_for: Callable[[str], float]) -> list[Key]:
        return [
            key
            for key, entry in self._entries.items()
            if due_for_revalidation(entry, now, interval_for(key[1]))
        ]


def group_by_project(keys: Iterable[Key]) -> dict[str, list[tuple[str, str]]]:
    grouped: dict[str, list[tuple[str, str]]] = {}
    for project_id, family, contract_id in keys:
        grouped.setdefault(project_id, []).append((family, contract_id))
    return grouped
