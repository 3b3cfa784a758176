"""The producer's side of the ingest flow: events checked before anything is written, then
written in one transaction, channel by channel (:class:`awooop.ingest.service.Ingestor` runs
it on a tenant session; :mod:`awooop.producer` on a transaction).

A producer event names its channel and its own idempotency id; nothing authenticates it (the
login's tenant binding is the guard): the ingest statement refuses a transaction whose tenant
is not the event's project (:class:`ProducerTransactionError`) and a login not bound to the
project (:class:`TenantNotGrantedError`, E-INGEST-003) before it writes anything
(:func:`awooop.ingest.ingest_write.ingest`), on every call, cached configuration or not.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import msgspec

from awooop.core import metrics
from awooop.core.config import Settings
from awooop.core.errors import InvalidInputError
from awooop.core.querier import Querier
from awooop.core.telemetry import tracer
from awooop.ingest import ingest_write
from awooop.ingest.cache import ConfigCache
from awooop.ingest.common import ParsedEvent, check_storable, event_id
from awooop.ingest.credentials import check_channel

_json_encode = msgspec.json.Encoder().encode


class ChannelEvent(msgspec.Struct, frozen=True):
    """An event to submit: its channel, its idempotency id within the channel, the run input."""

    channel_type: str
    provider_event_id: str
    input: Any


class Submitted(msgspec.Struct, frozen=True):
    provider_event_id: str
    run_id: uuid.UUID
    created: bool


class Submission(msgspec.Struct, frozen=True):
    """A producer's events, checked and grouped by channel (each with its index in the call)."""

    project_id: str
    contract_id: str
    size: int
    groups: dict[str, list[tuple[int, ParsedEvent]]]


def prepare(project_id: str, contract_id: str, events: Sequence[ChannelEvent]) -> Submission:
    """Pure: every event checked (channel, id, JSON, what jsonb can store), so that one bad
    event refuses the whole call before anything is written. The ids are the caller's to
    check first (``check_project_id``, ``check_contract_id``)."""
    groups: dict[str, list[tuple[int, ParsedEvent]]] = {}
    for index, event in enumerate(events):
        groups.setdefault(check_channel(event.channel_type), []).append((index, parsed(event)))
    return Submission(project_id, contract_id, len(events), groups)


def parsed(event: ChannelEvent) -> ParsedEvent:
    key = event_id(event.provider_event_id, "provider_event_id")
    try:
        _json_encode(event.input)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidInputError(f"the event input is not JSON-serialisable: {exc}") from None
    check_storable(event.input)
    return ParsedEvent(key, event.input)


async def write(
    conn: Querier,
    settings: Settings,
    submission: Submission,
    cache: ConfigCache | None = None,
) -> list[Submitted]:
    """The submission on ``conn`` (the tenant set): for each channel, its configuration
    (from ``cache`` when given and fresh) and one ingest statement; one result per event, in
    the call's order."""
    project_id, contract_id = submission.project_id, submission.contract_id
    results: list[Submitted | None] = [None] * submission.size
    with tracer.start_as_current_span(
        "ingest",
        attributes={"awooop.project_id": project_id, "awooop.source": "producer"},
    ):
        metadata = ingest_write.trace_metadata("producer")
        for channel_type in sorted(submission.groups):  # one lock order across channels too
            key = (project_id, channel_type, contract_id, None)
            cached = cache.get(key) if cache is not None else None
            config = cached or await ingest_write.load_producer_config(
                conn, settings, project_id, channel_type, contract_id
            )
            group = submission.groups[channel_type]
            outcomes = await ingest_write.ingest(
                conn,
                project_id,
                channel_type,
                [p for _, p in group],
                config=config,
                contract_id=contract_id,
                metadata=metadata,
            )
            # Kept only once the statement's guard let the transaction write: a transaction
            # of another tenant, or a login not bound to the project, reads the configuration
            # through row-level security as the defaults.
            if cache is not None and cached is None:
                cache.put(key, config)
            for (index, _), outcome in zip(group, outcomes, strict=True):
                results[index] = Submitted(
                    outcome.provider_event_id, outcome.run_id, outcome.created
                )
    return [r for r in results if r is not None]


def count(submission: Submission, results: list[Submitted]) -> None:
    """The events created and seen before, per channel; counted once the call returns (for
    a caller's transaction: before it commits)."""
    for channel_type, group in submission.groups.items():
        created = sum(1 for index, _ in group if results[index].created)
        if created:
            metrics.INGEST_EVENTS.labels(channel_type, "created").inc(created)
        if len(group) - created:
            metrics.INGEST_EVENTS.labels(channel_type, "duplicate").inc(len(group) - created)
