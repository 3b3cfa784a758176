"""The ingest service: one :class:`Ingestor` behind the HTTP route and the producer library.

An Ingestor owns what a stream of deliveries shares: tenant sessions (connections whose
session carries the project, :class:`awooop.core.sessions.TenantSessions`), the channel
configurations read lately (:class:`awooop.ingest.cache.ConfigCache`) and the group commit
(:mod:`awooop.core.batching`). Plain methods, no web framework:

- :meth:`Ingestor.receive`: one provider webhook, from the raw path and query values to its
  outcomes (span ``ingest``, refusals counted and logged, then raised for the caller to
  answer with the error's code and status). Order of checks: unknown channel E-CHANNEL-001,
  bad project or contract id E-INPUT-001, the body (its reader refuses one too large,
  E-INPUT-003), authentication E-AUTH-001, parsing E-INPUT-001 / E-INPUT-002 / E-INGEST-004,
  then the ingest statement (:mod:`awooop.ingest.ingest_write`) shared with the deliveries for the
  same project, channel and contract that arrive while the previous statement runs. When that
  statement fails for anything but the database being away, each delivery of the batch is
  written alone: one delivery's data that Postgres refuses is E-DATA-001 for it only.
- :meth:`Ingestor.submit`: a producer's checked events (:mod:`awooop.ingest.submission`) on
  one tenant session, the configuration from the cache when fresh.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from opentelemetry import trace

from awooop.core import metrics
from awooop.core.batching import Batcher, data_error
from awooop.core.config import Settings
from awooop.core.errors import AuthenticationError, AwoooPError, UnknownChannelError
from awooop.core.logs import get_logger
from awooop.core.sessions import TenantSessions
from awooop.core.storable import unstorable
from awooop.core.telemetry import extract, tracer
from awooop.ingest import ADAPTERS, ingest_write, submission
from awooop.ingest.auth import bearer_token_id
from awooop.ingest.cache import ConfigCache
from awooop.ingest.common import Adapter, AuthKind, Headers, ParsedEvent
from awooop.ingest.credentials import check_contract_id, check_project_id

log = get_logger(__name__)


class Delivery(msgspec.Struct, frozen=True):
    """One authenticated, parsed request waiting for its share of a group commit."""

    events: list[ParsedEvent]
    metadata: dict[str, Any]  # its own trace context, recorded on its events
    config: ingest_write.ChannelConfig


# Deliveries that may share a statement: one tenant, channel and contract, one configuration.
BatchKey = tuple[str, str, str, float, int]


class Ingestor:
    def __init__(
        self, settings: Settings, sessions: TenantSessions, *, webhooks: bool = True
    ) -> None:
        """``webhooks``: this Ingestor serves webhooks (:meth:`receive`), so their metric
        series are bound now and exported from the start, at zero; a producer's Ingestor
        binds none (a producer-only process exports no webhook series)."""
        self.settings = settings
        self.sessions = sessions
        self.cache = ConfigCache(settings.ingest_config_cache_s)
        self.batcher: Batcher[BatchKey, Delivery, list[ingest_write.Outcome]] = Batcher(
            self._write, max_batch=settings.ingest_batch_max_deliveries
        )
        self._counters: dict[tuple[str, str], Any] = {}
        self._latency: dict[str, Any] = {}
        if webhooks:
            self._bind_metrics()

    def _bind_metrics(self) -> None:
        self._counters = {
            (channel, outcome): metrics.INGEST_EVENTS.labels(channel, outcome)
            for channel in (*ADAPTERS, "unknown")
            for outcome in ("created", "duplicate", "rejected")
        }
        self._latency = {channel: metrics.INGEST_LATENCY.labels(channel) for channel in ADAPTERS}

    # --- provider webhooks ----------------------------------------------------------------

    async def receive(
        self,
        channel_type: str,
        project_id: str,
        contract_id: str,
        headers: Headers,
        body: Callable[[], Awaitable[bytes]],
        *,
        gone: tuple[type[BaseException], ...] = (),
    ) -> list[ingest_write.Outcome]:
        """One delivery as it arrived (``headers`` lowercase, ``body`` read only once the
        ids passed); ``gone``: the caller's exceptions for a client that went away, which
        are marked on the span and re-raised, neither counted nor logged here."""
        started = time.perf_counter()
        if not self._counters:
            self._bind_metrics()
        adapter = ADAPTERS.get(channel_type)
        label = channel_type if adapter is not None else "unknown"
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
                checked_project = check_project_id(project_id)
                span.set_attribute("awooop.project_id", checked_project)
                checked_contract = check_contract_id(contract_id)
                outcomes = await self.deliver(
                    adapter, checked_project, checked_contract, headers, await body()
                )
            except AwoooPError as exc:
                self._refused(exc, span, project_id, label)
                raise
            except gone:
                span.set_attribute("awooop.client_disconnected", True)
                raise
            except Exception as exc:
                span.record_exception(exc)
                span.set_status(trace.StatusCode.ERROR, type(exc).__name__)
                raise
        created = sum(1 for o in outcomes if o.created)
        if created:
            self._counters[label, "created"].inc(created)
        if len(outcomes) - created:
            self._counters[label, "duplicate"].inc(len(outcomes) - created)
        self._latency[label].observe(time.perf_counter() - started)
        return outcomes

    def _refused(self, exc: AwoooPError, span: trace.Span, project_id: str, label: str) -> None:
        self._counters[label, "rejected"].inc()
        span.set_attribute("awooop.error_code", exc.code)
        # Failed authentication is what an operator looks for (a provider set up with the
        # wrong secret, or a probe); other 4xx are the caller's bug; 5xx (the database is
        # away) are ours.
        if exc.http_status >= 500:
            report = log.error
        elif exc.http_status in (401, 403):
            report = log.warning
        else:
            report = log.info
        report(
            "ingest_refused",
            project_id=project_id[:64],
            channel_type=label,
            code=exc.code,
            status=exc.http_status,
            reason=exc.message,
        )
        if exc.http_status >= 500:
            span.set_status(trace.StatusCode.ERROR, exc.code)

    async def deliver(
        self, adapter: Adapter, project_id: str, contract_id: str, headers: Headers, body: bytes
    ) -> list[ingest_write.Outcome]:
        """Authenticate, parse and write one delivery whose ids were checked."""
        config = await self.channel_config(adapter, project_id, contract_id, headers, body)
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
        delivery = Delivery(events, ingest_write.trace_metadata("http"), config)
        try:
            return await self.batcher.submit(key, delivery)
        except Exception as exc:
            if data_error(exc):  # this delivery's own data (the batcher isolated it)
                raise unstorable("the delivery", exc) from exc
            raise

    async def channel_config(
        self, adapter: Adapter, project_id: str, contract_id: str, headers: Headers, body: bytes
    ) -> ingest_write.ChannelConfig:
        """The channel's configuration, once the request authenticated against it."""
        token_id = bearer_token_id(headers) if adapter.auth is AuthKind.BEARER else None
        key = (project_id, adapter.channel_type, contract_id, token_id)
        config = self.cache.get(key)
        if config is not None:
            try:
                adapter.authenticate(headers, body, config.credential)
                return config
            except AuthenticationError:
                self.cache.drop(key)  # perhaps a new secret: ask the database
        settings = self.settings
        config = await self.sessions.run(
            project_id,
            lambda conn: ingest_write.load_config(
                conn, settings, project_id, adapter.channel_type, contract_id, token_id
            ),
        )
        adapter.authenticate(headers, body, config.credential)
        self.cache.put(key, config)
        return config

    async def _write(
        self, key: BatchKey, deliveries: list[Delivery]
    ) -> list[list[ingest_write.Outcome] | BaseException]:
        """One statement for every delivery of the batch (ingest_write.ingest keeps each event
        atomic with its run and first event, and a key repeated across deliveries is created
        once: the later delivery gets the duplicate answer, as if it came second)."""
        project_id, channel_type, contract_id = key[:3]
        metrics.INGEST_BATCH.observe(len(deliveries))
        events = [event for d in deliveries for event in d.events]
        metadata = [d.metadata for d in deliveries for _ in d.events]
        # A failed statement fails the batch; the batcher then writes each delivery alone
        # (unless the database is away), so that one delivery's data fails only that one.
        outcomes = await self.sessions.run(
            project_id,
            lambda conn: ingest_write.ingest(
                conn,
                project_id,
                channel_type,
                events,
                config=deliveries[0].config,
                contract_id=contract_id,
                metadata=metadata,
            ),
        )
        results: list[list[ingest_write.Outcome] | BaseException] = []
        start = 0
        for delivery in deliveries:
            results.append(outcomes[start : start + len(delivery.events)])
            start += len(delivery.events)
        return results

    # --- the producer library -------------------------------------------------------------

    async def submit(
        self, checked: submission.Submission, settings: Settings | None = None
    ) -> list[submission.Submitted]:
        """A producer's checked events on one tenant session (no multi-statement
        transaction: the configuration read, then one ingest statement per channel), the
        configuration from the cache when fresh. ``settings``: the call's own, for the
        defaults of a configuration read now (the Ingestor's when None)."""
        settings = settings or self.settings
        results = await self.sessions.run(
            checked.project_id,
            lambda conn: submission.write(conn, settings, checked, self.cache),
        )
        submission.count(checked, results)
        return results
