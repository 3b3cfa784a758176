"""The ``relay`` loop (platform category): Postgres outbox -> Redis Streams (R-22, R-31)."""

from __future__ import annotations

from awooop.config import Settings
from awooop.loops import LoopCategory, LoopSpec
from awooop.services import Services
from streams.relay import Relay


def relay_spec(relay: Relay, settings: Settings) -> LoopSpec:
    return LoopSpec(
        name="relay",
        category=LoopCategory.PLATFORM,
        interval_s=settings.relay_poll_interval_s,
        body=relay.step,
        description="publish committed events and contract notices to Redis Streams "
        "(one active relay per database; NOTIFY wake-up, poll fallback)",
    )


def loops(services: Services) -> list[LoopSpec]:
    relay = Relay(settings=services.settings, redis=services.redis, keys=services.keys)
    return [relay_spec(relay, services.settings)]
