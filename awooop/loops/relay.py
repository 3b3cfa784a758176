"""The ``relay`` loop (platform category): Postgres outbox -> Redis Streams (R-22, R-31)."""

from __future__ import annotations

from dataclasses import replace

from awooop.core.config import Settings
from awooop.core.loops import LoopCategory, LoopSpec
from awooop.services import Services
from awooop.streams.relay import Relay


def relay_spec(relay: Relay, settings: Settings) -> LoopSpec:
    return LoopSpec(
        name="relay",
        category=LoopCategory.PLATFORM,
        interval_s=settings.relay_poll_interval_s,
        body=relay.step,
        description="publish committed events and contract notices to Redis Streams "
        "(one active relay per database, leader by lease; NOTIFY wake-up, poll fallback)",
    )


def loops(services: Services) -> list[LoopSpec]:
    relay = Relay(settings=services.settings, redis=services.redis, keys=services.keys)
    # When the loop stops: save the cursor and release the lease, so a standby leads at once
    # instead of after AWOOOP_RELAY_LEADER_LEASE_S. (Closed by the loop that ran it, not
    # registered on the services: building the spec has no effect.)
    return [replace(relay_spec(relay, services.settings), close=relay.close)]
