"""The projector runner: applies stream deliveries to a projection, exactly once per event.

The seam is :meth:`Projector.handle` (``delivery -> bool``, True: acknowledge): the consumer
toolkit (``awooop.streams.consumer.GroupConsumer``) calls it for each message of the shard events
streams read through the group ``projector:<name>``; tests call it with envelopes built from
the Postgres log. Concurrent calls are gathered into one transaction (a micro-batch).

Per batch, in ONE transaction (platform role):
1. take a transaction-scoped advisory lock per stream (sorted: no deadlock between batches of
   two projector processes, or with the reconcile pass);
2. read each stream's version stored with the view, and :func:`awooop.projections.base.plan` it:
   duplicates and old events are no-ops, the next versions are applied, a gap is filled from
   the Postgres log (``eventlog.read_stream``), never skipped;
3. write the view rows and their new versions (the checkpoint) together; commit; then ack.
A batch is one span, ``project <name>`` (the stream consumer makes no span per message for a
projector), sampled as an iteration of the projector's loop.
A crash before the commit leaves the messages pending (redelivered, applied once); a crash
between the commit and the ack redelivers them as duplicates (no-ops).

Self-healing (:meth:`Projector.reconcile`): compare the view's per-stream versions with
``awooop_event_streams.version`` and apply what is missing from Postgres. It runs at start,
periodically, and from ``on_reset(shard)`` when the relay found Redis had lost its data.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from opentelemetry import trace
from opentelemetry.context import Context

from awooop.core import metrics
from awooop.core.batching import shared_failure
from awooop.core.db import Connection, Database
from awooop.core.errors import ProjectionStreamError
from awooop.core.logs import get_logger
from awooop.core.loop_sampling import LOOP_ATTRIBUTE
from awooop.core.telemetry import tracer
from awooop.projections.base import (
    LIVE,
    LogEvent,
    Projection,
    TableNames,
    decode_payload,
    plan,
    stream_range,
)
from awooop.streams.envelope import Envelope

log = get_logger(__name__)

# --- SQL ------------------------------------------------------------------------------------

# Locks in hash order (sorted in the subquery), so two batches never wait on each other in a
# cycle even when two stream ids share a hash.
LOCK_STREAMS = """
SELECT count(pg_advisory_xact_lock(k)) FROM (
    SELECT DISTINCT hashtextextended($1 || ':' || s, 0) AS k FROM unnest($2::text[]) AS s
    ORDER BY k
) locks
"""
READ_STREAMS = """
SELECT position, stream_id, version, project_id, event_type, data::text AS data,
       metadata->>'traceparent' AS traceparent
FROM awooop_events
WHERE stream_id = ANY($1::text[])
ORDER BY stream_id, version
"""


class HasEnvelope(Protocol):
    """What the runner needs of a delivery (``awooop.streams.delivery.Delivery`` has it)."""

    @property
    def envelope(self) -> Envelope: ...


@dataclass
class BatchResult:
    applied: int = 0
    duplicates: int = 0
    filled: int = 0

    def add(self, other: BatchResult) -> None:
        self.applied += other.applied
        self.duplicates += other.duplicates
        self.filled += other.filled


class Projector:
    """Keeps one projection's live tables up to date from stream deliveries."""

    def __init__(
        self,
        db: Database,
        projection: Projection,
        *,
        names: TableNames = LIVE,
        reconcile_chunk: int = 200,
    ) -> None:
        self.db = db
        self.projection = projection
        self.names = names
        self.reconcile_chunk = reconcile_chunk
        self.low, self.high = stream_range(projection.stream_prefix)
        self._pending: list[tuple[LogEvent, asyncio.Future[bool]]] = []
        self._flusher: asyncio.Task[None] | None = None
        # Every series of the projection exists from its start: rate() and increase() panels
        # and rules read 0 on a healthy system, not "No data".
        for outcome in ("applied", "filled", "duplicate"):
            metrics.PROJECTOR_EVENTS.labels(self.name, outcome)
        metrics.PROJECTOR_RECONCILED.labels(self.name)
        metrics.PROJECTOR_FAILURES.labels(self.name)

    @property
    def name(self) -> str:
        return self.projection.name

    def follows(self, event: Envelope | LogEvent) -> bool:
        """Whether the event belongs to this projection (other projections share the
        shard streams)."""
        return self.low <= event.stream_id < self.high and (
            self.projection.skips_undeclared or event.event_type in self.projection.event_types
        )

    # --- the seam ----------------------------------------------------------------------------

    async def handle(self, delivery: HasEnvelope) -> bool:
        """Apply one delivery (gathered with concurrent ones); True when it may be acked."""
        envelope = delivery.envelope
        if not self.follows(envelope):
            return True  # another projection's events share the shard stream
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending.append((LogEvent.from_envelope(envelope), future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        await asyncio.sleep(0)  # let the concurrent handlers of this read join the batch
        while self._pending:
            batch, self._pending = self._pending, []
            with self._batch_span(len(batch)) as span:
                try:
                    result = await self.apply_events([event for event, _ in batch])
                except Exception as exc:
                    span.record_exception(exc)
                    span.set_status(trace.StatusCode.ERROR)
                    metrics.PROJECTOR_FAILURES.labels(self.name).inc()
                    log.exception("projector_batch_failed", projection=self.name, events=len(batch))
                    if shared_failure(exc):
                        _settle(batch, False)
                    else:
                        await self._apply_each_stream(batch)
                else:
                    span.set_attributes(
                        {
                            "awooop.applied": result.applied,
                            "awooop.duplicates": result.duplicates,
                            "awooop.filled": result.filled,
                        }
                    )
                    _settle(batch, True)

    def _batch_span(self, events: int) -> AbstractContextManager[trace.Span]:
        """The one span of a batch: a root span sampled as an iteration of the projector's loop
        (``AWOOOP_LOOP_TRACE_SAMPLE_RATIO``; a failed batch always kept), not one span per
        event in each event's trace."""
        return tracer.start_as_current_span(
            f"project {self.name}",
            context=Context(),
            kind=trace.SpanKind.CONSUMER,
            attributes={
                LOOP_ATTRIBUTE: f"projector:{self.name}",
                "awooop.projection": self.name,
                "awooop.events": events,
            },
        )

    async def _apply_each_stream(self, batch: list[tuple[LogEvent, asyncio.Future[bool]]]) -> None:
        """A batch failed for a reason that one stream's events may have caused (a bad value in
        the read model, a bug in ``apply`` for one shape of event): apply each stream's events
        in a transaction of their own, so that only the failing stream's deliveries stay
        pending (redelivered, retried) and the other streams go on. A stream is the unit:
        its events must be applied in version order."""
        by_stream: dict[str, list[tuple[LogEvent, asyncio.Future[bool]]]] = {}
        for item in batch:
            by_stream.setdefault(item[0].stream_id, []).append(item)
        if len(by_stream) == 1:
            _settle(batch, False)
            return
        for stream_id, items in by_stream.items():
            try:
                await self.apply_events([event for event, _ in items])
            except Exception as exc:
                log.warning(
                    "projector_stream_failed",
                    projection=self.name,
                    stream_id=stream_id,
                    error=repr(exc),
                )
                _settle(items, False)
            else:
                _settle(items, True)

    # --- one transaction ---------------------------------------------------------------------

    async def apply_events(self, events: Sequence[LogEvent]) -> BatchResult:
        """Apply ``events`` (any order, duplicates allowed; events of streams this projection
        does not follow are ignored) in one transaction."""
        by_stream: dict[str, list[LogEvent]] = {}
        for e in events:
            if self.follows(e):
                by_stream.setdefault(e.stream_id, []).append(e)
        if not by_stream:
            return BatchResult()

        async def transaction(conn: Connection) -> BatchResult:
            return await self._apply_locked(conn, by_stream)

        result = await self.db.in_platform_writes(transaction)
        self._count(result)
        return result

    async def _apply_locked(
        self, conn: Connection, by_stream: dict[str, list[LogEvent]]
    ) -> BatchResult:
        result = BatchResult()
        streams = sorted(by_stream)
        await conn.fetchval(LOCK_STREAMS, self.name, streams)
        stored = await self.projection.load_versions(conn, self.names, streams)
        to_apply: dict[str, list[LogEvent]] = {}
        gaps: dict[str, int] = {}
        for stream_id in streams:
            delivered = by_stream[stream_id]
            current = stored.get(stream_id, 0)
            decision = plan(current, [e.version for e in delivered])
            fresh = {e.version for e in delivered if e.version > current}
            result.duplicates += len(delivered) - len(fresh)
            if decision.fill_after is not None:
                gaps[stream_id] = decision.fill_after
            elif decision.apply:
                first = {e.version: e for e in reversed(delivered)}
                to_apply[stream_id] = [first[v] for v in decision.apply]
        if gaps:
            filled = await self._read_after(conn, gaps)
            for stream_id, events in filled.items():
                to_apply[stream_id] = events
                result.filled += len(events)
        result.applied = sum(len(v) for v in to_apply.values())
        await self.projection.apply(conn, self.names, to_apply)
        return result

    async def _read_after(
        self, conn: Connection, after: dict[str, int]
    ) -> dict[str, list[LogEvent]]:
        """The committed events of each stream after the given version, from Postgres."""
        events: dict[str, list[LogEvent]] = {}
        for r in await conn.fetch(READ_STREAMS, list(after)):
            if r["version"] <= after[r["stream_id"]]:
                continue
            if (
                r["event_type"] not in self.projection.event_types
                and not self.projection.skips_undeclared
            ):
                raise ProjectionStreamError(
                    f"stream {r['stream_id']} v{r['version']}: event type {r['event_type']} "
                    f"is not declared by projection {self.name}",
                    stream_id=r["stream_id"],
                )
            events.setdefault(r["stream_id"], []).append(_log_event(r))
        return events

    def _count(self, result: BatchResult) -> None:
        for outcome, n in (
            ("applied", result.applied - result.filled),
            ("filled", result.filled),
            ("duplicate", result.duplicates),
        ):
            if n:
                metrics.PROJECTOR_EVENTS.labels(self.name, outcome).inc(n)

    # --- self-healing ----------------------------------------------------------------------

    async def reconcile(self, project: str | None = None) -> int:
        """Apply from Postgres every event the view is missing; return how many."""

        async def lagging(conn: Connection) -> list[Any]:
            return list(
                await conn.fetch(
                    self.projection.lagging_sql(self.names), self.low, self.high, project
                )
            )

        rows = await self.db.in_platform(lagging)
        applied = 0
        for i in range(0, len(rows), self.reconcile_chunk):
            chunk = sorted(r["stream_id"] for r in rows[i : i + self.reconcile_chunk])

            async def transaction(conn: Connection, chunk: list[str] = chunk) -> int:
                await conn.fetchval(LOCK_STREAMS, self.name, chunk)
                stored = await self.projection.load_versions(conn, self.names, chunk)
                events = await self._read_after(conn, {s: stored.get(s, 0) for s in chunk})
                await self.projection.apply(conn, self.names, events)
                return sum(len(v) for v in events.values())

            applied += await self.db.in_platform_writes(transaction)
        if applied:
            metrics.PROJECTOR_RECONCILED.labels(self.name).inc(applied)
            log.info("projector_reconciled", projection=self.name, events=applied)
        return applied

    async def on_reset(self, shard: int) -> None:
        """The relay found shard ``shard``'s Redis data lost: heal from Postgres."""
        log.warning("projector_stream_reset", projection=self.name, shard=shard)
        await self.reconcile()


def _log_event(r: Any) -> LogEvent:
    return LogEvent(
        stream_id=r["stream_id"],
        version=r["version"],
        project_id=r["project_id"],
        position=r["position"],
        event_type=r["event_type"],
        event=decode_payload(r["stream_id"], r["data"]),
        traceparent=r["traceparent"],
    )


def _settle(items: list[tuple[LogEvent, asyncio.Future[bool]]], outcome: bool) -> None:
    for _, future in items:
        if not future.done():
            future.set_result(outcome)
