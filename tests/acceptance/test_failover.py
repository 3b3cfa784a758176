"""A primary failover under pg_auto_failover (issue 21, first part): one Database opened on a
multi-host URL keeps submitting through a SIGKILL of the primary, and every submit that
returned is on the new primary exactly once (the standby is synchronous, so an acknowledged
commit is on both). The producer retries a failed or hanging submit with the same key, as a
caller of an idempotent API does."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator

import asyncpg
import pytest

from awooop.core.db import Database
from awooop.core.migrate import migrate
from awooop.producer import ChannelEvent, submit
from tests.support import failover

P = "proj-failover"
BEFORE, AFTER = 150, 100  # acknowledged submits before the kill, and on the new primary
SUBMIT_TIMEOUT_S = 5.0  # a commit waiting for a standby that is being promoted: try again


@pytest.fixture
def formation() -> Iterator[failover.Formation]:
    reason = failover.missing()
    if reason is not None:
        pytest.fail(reason)
    formation = failover.Formation()
    try:
        formation.start()
        yield formation
    finally:
        formation.stop()


async def test_a_killed_primary_loses_no_acknowledged_submit_and_the_pools_follow(
    formation: failover.Formation,
) -> None:
    url = formation.url("awooop")
    await migrate(url)
    db = await Database.open(url)
    acked: list[str] = []
    errors: Counter[str] = Counter()
    first = await asyncio.to_thread(formation.primary)
    try:

        async def submit_until_acked(key: str, deadline: float) -> None:
            while True:
                try:
                    event = ChannelEvent("api", key, {"key": key})
                    await asyncio.wait_for(submit(db, P, event), SUBMIT_TIMEOUT_S)
                    acked.append(key)
                    return
                except Exception as exc:  # the switch: the caller retries with the same key
                    errors[type(exc).__name__] += 1
                    if time.monotonic() > deadline:
                        raise AssertionError(f"no primary took {key}: {dict(errors)}") from exc
                    await asyncio.sleep(0.2)

        deadline = time.monotonic() + 600
        for n in range(BEFORE):
            await submit_until_acked(f"before-{n}", deadline)
        killed = await asyncio.to_thread(formation.kill_primary)
        assert killed == first
        killed_at = time.monotonic()
        for n in range(AFTER):
            await submit_until_acked(f"after-{n}", killed_at + 180)
        switched_s = time.monotonic() - killed_at

        await asyncio.to_thread(
            formation.wait_for,
            lambda: formation.primary() not in (None, first),
            180,
            "the standby promoted",
        )
        second = await asyncio.to_thread(formation.primary)
        assert second is not None and second != first
        conn = await asyncpg.connect(formation.node_url(second, "awooop"))
        try:
            keys = Counter(
                r["provider_event_id"]
                for r in await conn.fetch(
                    "SELECT provider_event_id FROM awooop_channel_event_dedupe "
                    "WHERE project_id = $1",
                    P,
                )
            )
            runs = await conn.fetchval(
                "SELECT count(*) FROM awooop_run_state WHERE project_id = $1", P
            )
            created = await conn.fetchval(
                "SELECT count(*) FROM awooop_events "
                "WHERE project_id = $1 AND event_type = 'RunCreated'",
                P,
            )
        finally:
            await conn.close()
        assert len(acked) == BEFORE + AFTER
        missing = [k for k in acked if keys[k] != 1]
        assert not missing, f"acknowledged but not on the new primary once: {missing[:10]}"
        # A submit that was not acknowledged may or may not have committed: never twice.
        assert all(count == 1 for count in keys.values())
        assert runs == created == len(keys)
        assert switched_s < 180, switched_s
    finally:
        await db.close()
