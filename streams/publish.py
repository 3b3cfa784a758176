"""Turning log rows into stream entries, and the guarded XADD of one shard's entries.

Routes: dispatch events go to the events and the work stream; every other event to the events
stream. (A ``RunFailed`` marked ``dead_letter`` is an ordinary event here: its dead letter was
recorded in Postgres with it, :mod:`awooop.eventlog.deadletters`.) A dispatch event whose run
the same transaction claimed at once (a ``RunClaimed`` at the next version of its stream, of
the same transaction: a worker's own fired sleep, ``fire_claim.sql``) goes to the events stream
only when both are in one batch (:func:`routes_of`): the run is taken, so no worker needs telling,
and a claimer that dies leaves it as any claimed run, to the lease's expiry. Split across two
batches, it goes to both, and its delivery finds the run already claimed.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from awooop.core.events import DISPATCH_EVENT_TYPES
from awooop.eventlog.eventlog import RecordedEvent
from awooop.streams import scripts
from awooop.streams.envelope import FIELD, Envelope, encode
from awooop.streams.keys import Keys

EVENTS_ONLY = "e"
WORK_ONLY = "w"
BOTH = "b"


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


def route_of(event_type: str) -> str:
    """The route of an event of ``event_type`` (module docstring)."""
    return BOTH if event_type in DISPATCH_EVENT_TYPES else EVENTS_ONLY


def routes_of(events: Sequence[RecordedEvent]) -> list[str]:
    """Pure: the route of each of ``events`` (a batch in log order; module docstring)."""
    claimed = {
        (e.stream_id, e.version - 1, e.tx_id) for e in events if e.event_type == "RunClaimed"
    }
    routes = []
    for event in events:
        route = route_of(event.event_type)
        if route == BOTH and (event.stream_id, event.version, event.tx_id) in claimed:
            route = EVENTS_ONLY
        routes.append(route)
    return routes


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
    routes = [route] * len(events) if route is not None else routes_of(events)
    for event, event_route in zip(events, routes, strict=True):
        shard = shards.get(event.project_id)
        if shard is None:
            shard = shards[event.project_id] = keys.shard_of(event.project_id)
        context = contexts.get(event.event_id) if contexts else None
        item = (event_route, encode(envelope_of(event, attempt, context, ahead_of)))
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
    result = await scripts.PUBLISH(
        redis,
        [guard_key, keys.events_stream(shard), keys.work_stream(shard)],
        [guard_value, FIELD, routes, sizes, blob],
    )
    return int(result)
