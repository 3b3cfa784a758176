"""``get_effective_policy``: the cache checked against the DB pointer before every use (R-24).

The split-brain defence (no call that starts after an activation uses the old revision), made
cheap: one query per call carries the cached revision ids of every contract the call needs and
returns the active pointers, plus the body of each active revision that differs from the
cached one. So:
- a hit (cache == pointer) costs exactly one round trip;
- a miss or a stale entry costs the same single round trip (the body comes back with it);
- because the check starts after the caller starts, a call that starts after an activation
  committed always sees the new pointer, on every worker, with or without Redis.

:meth:`PolicyResolver.get_cached_policy` is the cheaper read for paths that are not an LLM
call (for example channel-event contracts): it trusts the cache, which notices clear at once
and background re-validation bounds (30 s / 5 min by default).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

import msgspec

from awooop.core import metrics
from awooop.core.errors import AwoooPError
from awooop.core.telemetry import child_span
from awooop.revisions.cache import (
    CacheEntry,
    Key,
    RevisionCache,
    group_by_project,
    pointer_matches,
    revalidation_interval,
)
from awooop.revisions.pointer import Pointer, PointerChecker


class EffectivePolicy(msgspec.Struct, frozen=True, kw_only=True):
    project_id: str
    contract_family: str
    contract_id: str
    revision_id: uuid.UUID | None  # None: no active revision, ``body`` is empty
    body: dict[str, Any]
    body_hash: str | None


class PolicyResolver:
    def __init__(
        self,
        cache: RevisionCache,
        pointers: PointerChecker,
        policy_revalidate_s: float = 30.0,
        channel_event_revalidate_s: float = 300.0,
    ) -> None:
        self.cache = cache
        self.pointers = pointers
        self.policy_revalidate_s = policy_revalidate_s
        self.channel_event_revalidate_s = channel_event_revalidate_s

    def interval_for(self, family: str) -> float:
        return revalidation_interval(
            family, self.policy_revalidate_s, self.channel_event_revalidate_s
        )

    async def get_effective_policy(
        self, project_id: str, family: str, contract_id: str
    ) -> EffectivePolicy:
        (policy,) = await self.get_effective_policies(project_id, [(family, contract_id)])
        return policy

    async def get_effective_policies(
        self, project_id: str, contracts: Sequence[tuple[str, str]]
    ) -> list[EffectivePolicy]:
        """The policies of ``contracts``, each confirmed against the DB pointer in ONE query."""
        keys: list[Key] = [(project_id, family, contract) for family, contract in contracts]
        stamps = [self.cache.stamp(key) for key in keys]
        entries = [self.cache.get(key) for key in keys]
        with child_span(
            "revision.pointer_check",
            attributes={"awooop.project_id": project_id, "awooop.contracts": len(keys)},
        ) as span:
            started = time.perf_counter()
            pointers = await self.pointers.check(
                project_id,
                contracts,
                [None if e is None else e.revision_id for e in entries],
            )
            metrics.POINTER_CHECK_SECONDS.observe(time.perf_counter() - started)
            now = time.time()
            result: list[EffectivePolicy] = []
            stale = 0
            for key, stamp, entry, pointer in zip(keys, stamps, entries, pointers, strict=True):
                if pointer_matches(entry, pointer.active_revision_id):
                    assert entry is not None
                    metrics.REVISION_CACHE_HITS.inc()
                    self.cache.mark_validated(key, entry.revision_id, now)
                else:
                    if entry is None:
                        metrics.REVISION_CACHE_MISSES.inc()
                    else:
                        stale += 1
                        metrics.REVISION_CACHE_STALE.labels("pointer_check").inc()
                    entry = _entry_from(pointer, now)
                    self.cache.put(key, entry, stamp)
                result.append(_policy(key, entry))
            span.set_attribute("awooop.stale", stale)
        return result

    async def get_cached_policy(
        self, project_id: str, family: str, contract_id: str
    ) -> EffectivePolicy:
        """The cached policy without a pointer check (notices + re-validation keep it fresh);
        loads through the pointer check when absent."""
        entry = self.cache.get((project_id, family, contract_id))
        if entry is not None:
            metrics.REVISION_CACHE_HITS.inc()
            return _policy((project_id, family, contract_id), entry)
        return await self.get_effective_policy(project_id, family, contract_id)

    async def revalidate(self, now: float | None = None) -> int:
        """Check every entry due for re-validation against the pointer; drop the stale ones.

        One query per project. Returns the number of entries dropped."""
        now = time.time() if now is None else now
        dropped = 0
        for project_id, contracts in group_by_project(
            self.cache.due(now, self.interval_for)
        ).items():
            keys: list[Key] = [(project_id, f, c) for f, c in contracts]
            entries = [self.cache.get(key) for key in keys]
            pointers = await self.pointers.check(
                project_id, contracts, [None if e is None else e.revision_id for e in entries]
            )
            checked_at = time.time()
            for key, entry, pointer in zip(keys, entries, pointers, strict=True):
                if entry is None:
                    continue
                if pointer_matches(entry, pointer.active_revision_id):
                    self.cache.mark_validated(key, entry.revision_id, checked_at)
                elif self.cache.drop(key, entry.revision_id):
                    dropped += 1
                    metrics.REVISION_CACHE_STALE.labels("revalidation").inc()
        return dropped


def _entry_from(pointer: Pointer, now: float) -> CacheEntry:
    if pointer.active_revision_id is None:
        return CacheEntry(
            body={}, revision_id=None, body_hash=None, cached_at=now, validated_at=now
        )
    if pointer.body is None:  # cannot happen: the FK keeps the revision, the query sends it
        raise AwoooPError("active revision has no body", revision_id=pointer.active_revision_id)
    return CacheEntry(
        body=pointer.body,
        revision_id=pointer.active_revision_id,
        body_hash=pointer.body_hash,
        cached_at=now,
        validated_at=now,
    )


def _policy(key: Key, entry: CacheEntry) -> EffectivePolicy:
    body = entry.body if isinstance(entry.body, dict) else {}
    return EffectivePolicy(
        project_id=key[0],
        contract_family=key[1],
        contract_id=key[2],
        revision_id=entry.revision_id,
        body=body,
        body_hash=entry.body_hash,
    )
