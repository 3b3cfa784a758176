"""Doctor's check of concurrency keys: a key whose runs wait while none of them executes.

A slot is a live lease, so a key can only be full while runs of it execute; a key whose runs
have waited longer than :data:`STUCK_AFTER_S` (or ten poll intervals) with no run of it
executing means they are not being admitted at all: no worker takes work, or something holds
the key's admissions (a leak would show here)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from awooop.commands.doctor_results import OK, WARN, Check
from awooop.runs import concurrency
from awooop.runs.concurrency import KeyUsage
from awooop.services import Services

STUCK_AFTER_S = 60.0
SCANNED_KEYS = 1000


def stuck(usage: Iterable[KeyUsage], now: datetime, after_s: float) -> list[KeyUsage]:
    """Pure: the keys with runs waiting for longer than ``after_s`` and none executing."""
    return [
        u
        for u in usage
        if u.waiting > 0
        and u.executing == 0
        and u.oldest_waiting_at is not None
        and (now - u.oldest_waiting_at).total_seconds() > after_s
    ]


async def concurrency_keys(services: Services) -> list[Check]:
    after_s = max(STUCK_AFTER_S, 10 * services.settings.poll_interval_s)
    async with services.db.platform() as conn:
        usage = await concurrency.usage(conn, None, SCANNED_KEYS)
        now: datetime = await conn.fetchval("SELECT now()")
    found = stuck(usage, now, after_s)
    if not found:
        return [Check("concurrency keys", OK, f"{len(usage)} key(s) with live runs; none stuck")]
    named = ", ".join(f"{u.project_id} {u.key} ({u.waiting} waiting)" for u in found[:5])
    return [
        Check(
            "concurrency keys",
            WARN,
            f"{len(found)} key(s) with runs waiting over {after_s:.0f} s and none executing: "
            f"{named}",
            "are workers running (`awooop doctor`: consumer groups)? `awooop projects limits "
            "--project P` shows the key; `awooop runs show` its runs' blocked_on",
        )
    ]
