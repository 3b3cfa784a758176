"""``POST /v1/projects/{project_id}/channels/{channel_type}``: provider webhooks become runs.

Order of checks, each refusal a JSON error with a code and nothing written:
unknown channel 404 E-CHANNEL-001; bad project or contract id 400 E-INPUT-001; body over
AWOOOP_HTTP_MAX_BODY_BYTES 413 E-INPUT-003 (counted while reading, Content-Length is only a
shortcut); then, on a connection whose session carries the project
(:class:`awooop.core.db.TenantSessions`): authentication 401 E-AUTH-001, parsing 400 E-INPUT-001 /
422 E-INPUT-002 / 403 E-INGEST-004 (an event older than the channel's bound, LINE), and the
ingest itself, one atomic statement (:mod:`awooop.ingest.store`)
shared with the deliveries for the same project, channel and contract that arrive while the
previous statement runs (group commit, :mod:`awooop.core.batching`; docs/ingest.md). When that
statement fails for anything but the database being away, each delivery of the batch is
written alone: one delivery's data that Postgres refuses is 422 E-DATA-001 for that delivery
only, and nothing of it is written.

Answers: 202 ``{"run_ids": [...], "results": [...]}`` when the delivery created at least
one run; 200 with ``"code": "E-IDEMPOTENT-001"`` and the existing ``run_id`` when every event
was seen before (LINE: one result per event, each ``created`` or ``duplicate``); 200 with
empty lists for a delivery with no events (LINE's webhook verification). ``?contract_id=``
names the agent contract (default ``default``).
"""

from __future__ import annotations

import time
from typing import Any

import msgspec
from opentelemetry import trace
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from awooop.core import metrics
from awooop.core.batching import Batcher, data_error
from awooop.core.db import TenantSessions
from awooop.core.errors import (
    AuthenticationError,
    AwoooPError,
    DuplicateEvent,
    PayloadTooLargeError,
    UnknownChannelError,
)
from awooop.core.logs import get_logger
from awooop.core.storable import unstorable
from awooop.core.telemetry import extract, tracer
from awooop.ingest import ADAPTERS, store
from awooop.ingest.auth import bearer_token_id
from awooop.ingest.cache import ConfigCache
from awooop.ingest.common import Adapter, AuthKind, Headers, ParsedEvent
from awooop.ingest.credentials import check_contract_id, check_project_id
from awooop.services import Services

log = get_logger(__name__)
_encode = msgspec.json.Encoder().encode
DUPLICATE_MESSAGE = (DuplicateEvent.__doc__ or "").strip()


def json_response(body: Any, status_code: int) -> Response:
    return Response(_encode(body), status_code=status_code, media_type="application/json")


def lowercase_headers(request: Request) -> dict[str, str]:
    """Header values as UTF-8 text; bytes that are not UTF-8 stay as lone surrogates
    (``surrogateescape``), which :func:`awooop.ingest.common.event_id` refuses and
    :func:`awooop.ingest.auth.equal` compares byte for byte."""
    return {
        k.decode("latin-1").lower(): v.decode("utf-8", "surrogateescape")
        for k, v in request.headers.raw
    }


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it grows past ``limit``."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise PayloadTooLargeError(limit=limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLargeError(limit=limit)
        chunks.append(chunk)
    return b"".join(chunks)


def answer(outcomes: list[store.Outcome]) -> Response:
    results = [
        {"provider_event_id": o.provider_event_id, "run_id": o.run_id, "status": "created"}
        if o.created
        else {
            "provider_event_id": o.provider_event_id,
            "run_id": o.run_id,
            "status": "duplicate",
            "code": DuplicateEvent.code,
        }
        for o in outcomes
    ]
    run_ids = [o.run_id for o in outcomes]
    if any(o.created for o in outcomes) or not outcomes:
        return json_response(
            {"run_ids": run_ids, "results": results},
            202 if outcomes else DuplicateEvent.http_status,
        )
    return json_response(
        {
            "code": DuplicateEvent.code,
            "message": DUPLICATE_MESSAGE,
            "run_id": run_ids[0],
            "run_ids": run_ids,
            "results": results,
        },
        DuplicateEvent.http_status,
    )


class Delivery(msgspec.Struct, frozen=True):
    """One authenticated, parsed request waiting for its share of a group commit."""

    events: list[ParsedEvent]
    metadata: dict[str, Any]  # its own trace context, recorded on its events
    config: store.ChannelConfig


# Deliveries that may share a statement: one tenant, channel and contract, one configuration.
BatchKey = tuple[str, str, str, float, int]


def routes(services: Services) -> list[BaseRoute]:
    settings = services.settings
    sessions = TenantSessions(settings.database_url, settings.http_db_pool_size)
    services.closers.append(sessions.close)
    cache = ConfigCache(settings.ingest_config_cache_s)
    counters = {
        (channel, outcome): metrics.INGEST_EVENTS.labels(channel, outcome)
        for channel in (*ADAPTERS, "unknown")
        for outcome in ("created", "duplicate", "rejected")
    }
    latency = {channel: metrics.INGEST_LATENCY.labels(channel) for channel in ADAPTERS}

    async def channel_config(
        adapter: Adapter, project_id: str, contract_id: str, headers: Headers, body: bytes
    ) -> store.ChannelConfig:
        """The channel's configuration, once the request authenticated against it."""
        token_id = bearer_token_id(headers) if adapter.auth is AuthKind.BEARER else None
        key = (project_id, adapter.channel_type, contract_id, token_id)
        config = cache.get(key)
        if config is not None:
            try:
                adapter.authenticate(headers, body, config.credential)
                return config
            except AuthenticationError:
                cache.drop(key)  # perhaps a new secret: ask the database
        config = await sessions.run(
            project_id,
            lambda conn: store.load_config(
                conn, settings, project_id, adapter.channel_type, contract_id, token_id
            ),
        )
        adapter.authenticate(headers, body, config.credential)
        cache.put(key, config)
        return config

    async def write(
        key: BatchKey, deliveries: list[Delivery]
    ) -> list[list[store.Outcome] | BaseException]:
        """One statement for every delivery of the batch (store.ingest keeps each event
        atomic with its run and first event, and a key repeated across deliveries is created
        once: the later delivery gets the duplicate answer, as if it came second)."""
        project_id, channel_type, contract_id = key[:3]
        metrics.INGEST_BATCH.observe(len(deliveries))
        events = [event for d in deliveries for event in d.events]
        metadata = [d.metadata for d in deliveries for _ in d.events]
        # A failed statement fails the batch; the batcher then writes each delivery alone
        # (unless the database is away), so that one delivery's data fails only that one.
        outcomes = await sessions.run(
            project_id,
            lambda conn: store.ingest(
                conn,
                project_id,
                channel_type,
                events,
                config=deliveries[0].config,
                contract_id=contract_id,
                metadata=metadata,
            ),
        )
        results: list[list[store.Outcome] | BaseException] = []
        start = 0
        for delivery in deliveries:
            results.append(outcomes[start : start + len(delivery.events)])
            start += len(delivery.events)
        return results

    batcher: Batcher[BatchKey, Delivery, list[store.Outcome]] = Batcher(
        write, max_batch=settings.ingest_batch_max_deliveries
    )

    async def deliver(
        adapter: Adapter, project_id: str, contract_id: str, headers: Headers, body: bytes
    ) -> list[store.Outcome]:
        config = await channel_config(adapter, project_id, contract_id, headers, body)
        events = adapter.parse(headers, body, config.options, time.time())
        if not events:
            return []
        key = (
            project_id,
            adapter.channel_type,
            contract_id,
            config.dedupe_ttl_s,
            config.max_attempts,
        )
        try:
            return await batcher.submit(key, Delivery(events, store.trace_metadata("http"), config))
        except Exception as exc:
            if data_error(exc):  # this delivery's own data (the batcher isolated it)
                raise unstorable("the delivery", exc) from exc
            raise

    async def post_channel(request: Request) -> Response:
        started = time.perf_counter()
        channel_type = request.path_params["channel_type"]
        adapter = ADAPTERS.get(channel_type)
        label = channel_type if adapter is not None else "unknown"
        headers = lowercase_headers(request)
        with tracer.start_as_current_span(
            "ingest",
            context=extract(headers.get("traceparent"), headers.get("tracestate")),
            kind=trace.SpanKind.SERVER,
            attributes={"awooop.channel_type": label, "awooop.source": "http"},
            # A refusal is an answer, not a crash: its code goes on the span below, without
            # the traceback formatting that would make every refused request expensive.
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                if adapter is None:
                    raise UnknownChannelError(channel_type=channel_type[:40])
                project_id = check_project_id(request.path_params["project_id"])
                span.set_attribute("awooop.project_id", project_id)
                contract_id = check_contract_id(
                    request.query_params.get("contract_id", store.DEFAULT_CONTRACT)
                )
                body = await read_body(request, settings.http_max_body_bytes)
                outcomes = await deliver(adapter, project_id, contract_id, headers, body)
            except AwoooPError as exc:
                counters[label, "rejected"].inc()
                span.set_attribute("awooop.error_code", exc.code)
                # Failed authentication is what an operator looks for (a provider set up
                # with the wrong secret, or a probe); other 4xx are the caller's bug; 5xx
                # (the database is away) are ours.
                if exc.http_status >= 500:
                    report = log.error
                elif exc.http_status in (401, 403):
                    report = log.warning
                else:
                    report = log.info
                report(
                    "ingest_refused",
                    project_id=request.path_params["project_id"][:64],
                    channel_type=label,
                    code=exc.code,
                    status=exc.http_status,
                    reason=exc.message,
                )
                if exc.http_status >= 500:
                    span.set_status(trace.StatusCode.ERROR, exc.code)
                raise
            except ClientDisconnect:
                # The client went away mid-body: not our error (the app logs one info line).
                span.set_attribute("awooop.client_disconnected", True)
                raise
            except Exception as exc:
                span.record_exception(exc)
                span.set_status(trace.StatusCode.ERROR, type(exc).__name__)
                raise
        created = sum(1 for o in outcomes if o.created)
        if created:
            counters[label, "created"].inc(created)
        if len(outcomes) - created:
            counters[label, "duplicate"].inc(len(outcomes) - created)
        latency[label].observe(time.perf_counter() - started)
        return answer(outcomes)

    return [
        Route("/v1/projects/{project_id}/channels/{channel_type}", post_channel, methods=["POST"]),
    ]
