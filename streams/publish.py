"""Turning log rows into stream entries, and the guarded XADD of one shard's entries.

Routes: dispatch events go to the events and the work stream; a ``RunFailed`` marked
``dead_letter`` (the run's attempts all ended with an expired lease, R-19) goes to the events
stream and, as a dead letter for the run's work, to the shard's dead-letter stream; every other
event to the events stream. The dead letter is written from the log, so it exists even when
Redis lost the run's work message; like every publication it is at least once (a relay crash
before its cursor save, or a shard rebuild, can write it again: re-driving the copy finds the
run no longer FAILED and does no harm).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from awooop.core import metrics
from awooop.core.events import DISPATCH_EVENT_TYPES
from awooop.core.logs import get_logger
from awooop.log.eventlog import RecordedEvent
from streams import scripts
from streams.deadletter import DEAD_LETTER_MAXLEN
from streams.envelope import FIELD, Envelope, decode_envelope, encode
from streams.keys import WORKER_GROUP, Keys

log = get_logger(__name__)

EVENTS_ONLY = "e"
WORK_ONLY = "w"
BOTH = "b"
DEAD_LETTER = "d"  # the events stream, and the dead-letter stream (see the module docstring)


def envelope_of(
    event: RecordedEvent,
    attempt: int = 0,
    context: tuple[str | None, str | None] | None = None,
    ahead_of: tuple[int, int] | None = None,
) -> Envelope:
    """The envelope of a log row; trace context is ``context`` (the relay's publish span) or
    else comes from the row's metadata, where producers put ``traceparent``/``tracestate``
    (see ``awooop.core.telemetry.inject``); ``ahead_of``: the relay's cursor when the row is
    published ahead of it (``Envelope.ahead_of``)."""
    if context is not None:
        traceparent, tracestate = context
    else:
        meta = event.metadata if isinstance(event.metadata, dict) else {}
        traceparent = meta.get("traceparent")
        tracestate = meta.get("tracestate")
    return Envelope(
        event_id=event.event_id,
        position=event.position,
        tx_id=event.tx_id,
        stream_id=event.stream_id,
        version=event.version,
        project_id=event.project_id,
        event_type=event.event_type,
        payload=event.data.encode(),
        attempt=attempt,
        traceparent=traceparent if isinstance(traceparent, str) else None,
        tracestate=tracestate if isinstance(tracestate, str) else None,
        recorded_at=event.recorded_at.timestamp(),
        ahead_of=ahead_of,
    )


def route_of(event_type: str, data: str = "") -> str:
    """The route of an event of ``event_type`` whose JSON is ``data`` (module docstring)."""
    if event_type in DISPATCH_EVENT_TYPES:
        return BOTH
    if event_type == "RunFailed" and _payload(data).get("dead_letter") is True:
        return DEAD_LETTER
    return EVENTS_ONLY


def _payload(data: str | bytes) -> dict[str, Any]:
    try:
        decoded = msgspec.json.decode(data) if data else None
    except msgspec.DecodeError:
        return {}
    return decoded if isinstance(decoded, dict) else {}


def by_shard(
    events: Sequence[RecordedEvent],
    keys: Keys,
    attempt: int = 0,
    route: str | None = None,
    contexts: Mapping[uuid.UUID, tuple[str | None, str | None]] | None = None,
    ahead_of: tuple[int, int] | None = None,
) -> dict[int, list[tuple[str, bytes]]]:
    """(route, encoded envelope) per shard, in log order within each shard; ``contexts``: the
    trace context to send instead of the producer's, by event id (the relay's spans);
    ``ahead_of``: see :func:`envelope_of`."""
    grouped: dict[int, list[tuple[str, bytes]]] = {}
    shards: dict[str, int] = {}  # a batch has few projects: hash each once
    for event in events:
        shard = shards.get(event.project_id)
        if shard is None:
            shard = shards[event.project_id] = keys.shard_of(event.project_id)
        context = contexts.get(event.event_id) if contexts else None
        item = (
            route or route_of(event.event_type, event.data),
            encode(envelope_of(event, attempt, context, ahead_of)),
        )
        grouped.setdefault(shard, []).append(item)
    return grouped


async def publish_shard(
    redis: Any,
    keys: Keys,
    shard: int,
    guard_key: str,
    guard_value: str,
    items: Sequence[tuple[str, bytes]],
) -> int:
    """XADD ``items`` in one atomic script call if ``guard_key`` still holds ``guard_value``;
    returns the number of entries, or -1 (nothing written) when the guard changed."""
    routes = "".join(route for route, _ in items)
    sizes = ",".join(str(len(data)) for _, data in items)
    blob = b"".join(data for _, data in items)
    dead = [decode_envelope(data) for route, data in items if route == DEAD_LETTER]
    reasons = [str(_payload(env.payload).get("reason", "")) for env in dead]
    result = await scripts.PUBLISH(
        redis,
        [
            guard_key,
            keys.events_stream(shard),
            keys.work_stream(shard),
            keys.dead_letter_stream(shard),
        ],
        [guard_value, FIELD, routes, sizes, blob, str(DEAD_LETTER_MAXLEN), WORKER_GROUP, *reasons],
    )
    if int(result) >= 0 and dead:
        metrics.DEAD_LETTERS.inc(len(dead))
        for env, reason in zip(dead, reasons, strict=True):
            log.warning(
                "stream_dead_letter",
                stream=keys.work_stream(shard),
                group=WORKER_GROUP,
                run_id=env.stream_id.removeprefix("run-"),
                reason=reason,
            )
    return int(result)
