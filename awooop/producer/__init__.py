"""The producer library (R-06): channel events from Python services, without HTTP.

:func:`submit` (one event) and :func:`submit_many` (a batch) run the same ingest transaction
as the HTTP server (:class:`awooop.ingest.service.Ingestor`, :mod:`awooop.ingest.ingest_write`):
dedupe row, run (PENDING) and ``RunCreated`` event, which is the outbox entry the relay
publishes. They take either

- a :class:`~awooop.core.db.Database`: :func:`submit_many` opens its own tenant transaction (and
  retries transient conflicts); :func:`submit` (one event) needs no transaction and uses a
  tenant session (``Database.sessions``, as the HTTP server does): the configuration read
  (cached for ``AWOOOP_INGEST_CONFIG_CACHE_S``, as the HTTP server caches it) and ONE
  statement that writes the dedupe row, the run and its event, instead of five round trips.
  (A key whose dedupe row expired takes a second round: its old row is deleted, then the run
  is written; should that fail between the two, retrying the call writes it.) Or
- the caller's own asyncpg connection **inside its open transaction**: the event commits or
  rolls back together with the caller's own writes (the point of a transactional outbox).
  The transaction must carry the tenant, i.e. ``awooop.project_id`` set to the event's
  project, which :func:`set_tenant` does. The channel's configuration is cached per
  connection for ``AWOOOP_INGEST_CONFIG_CACHE_S`` too, so a submit there is one statement
  (the ingest statement checks the tenant and the login's binding itself on every call)::

      async with conn.transaction():              # READ COMMITTED, the default
          await producer.set_tenant(conn, "shop")
          await conn.execute("INSERT INTO orders ...")
          result = await producer.submit(
              conn, "shop", producer.ChannelEvent("api", f"order-{order_id}", {"order": order_id})
          )
      # result.run_id; result.created is False when the key was seen within the TTL

  :func:`transaction` opens that transaction with the tenant set in one round trip instead
  of two (``BEGIN`` and ``set_config`` as one simple query; asyncpg connections;
  :mod:`awooop.producer.tenant_transaction`)::

      async with pool.acquire() as conn, producer.transaction(conn, "shop"):
          await conn.execute("INSERT INTO orders ...")
          result = await producer.submit(conn, "shop", event)

  The connection needs nothing of the runtime: a plain ``asyncpg.connect(...)`` or a pool
  without ``init`` works, and its type codecs (asyncpg's, or the service's own JSON codecs) are
  left alone (the producer's statements pass their JSON as text and read none).
  :func:`create_pool` is the way to produce through a pool: each new connection set up by
  :func:`init_connection` (dead-peer detection, the wait for the synchronous standby), one
  generic plan per statement (half the Postgres CPU of a submit once the tables have
  statistics) and no reset query on release (:func:`awooop.core.pools.create_service_pool`).
  A connection whose own codecs cannot carry the producer's plain arguments (text, uuid,
  numbers) is refused with :class:`~awooop.core.errors.ProducerConnectionError`
  (E-INGEST-005), nothing written, the transaction usable.

  A producer service logs in as its own role, bound to its projects by the operator
  (``awooop tenants grant my_service shop``: membership of ``awooop_producer`` and a row of
  ``awooop_tenant_grants``). Row-level security then limits it to the project set by
  ``set_tenant`` AND bound to its login: setting another project shows nothing and writes
  nothing, and a submit for a project the login is not bound to is refused before anything is
  written (:class:`~awooop.core.errors.TenantNotGrantedError`, E-INGEST-003; the caller's
  transaction stays usable). Never give a service ``awooop_app``: that is the runtime's own
  role, whose only guard is the setting.
  Under REPEATABLE READ or SERIALIZABLE, a repeat of a key that another transaction committed
  after the caller's snapshot raises Postgres' serialization failure
  (``asyncpg.SerializationError``; the dedupe insert cannot use a row its snapshot does not
  see): retry the transaction, or use READ COMMITTED. Should a conflicting row stay invisible
  anyway, the call raises :class:`~awooop.core.errors.DedupeRaceError` (E-INGEST-002, retryable)
  rather than answer without a run_id.

A submission whose channel or contract has a concurrency limit with a depth cap, and whose key
already has that many runs queued, raises :class:`~awooop.core.errors.ConcurrencyDepthError`
(E-CONCURRENCY-001, retryable later) before anything is written (docs/workers.md, Concurrency
keys).

The result says whether this call created the run; a repeat returns the existing run_id
(the producer's equivalent of HTTP's 200 E-IDEMPOTENT-001). Metrics count a created event
when the call returns, before the caller's transaction commits.

:func:`emit` / :func:`emit_many` append **domain events** (:class:`DomainEvent`: the caller's
own events, which start no run) at the head of the project's stream ``domain/<project>/<name>``,
with the same two kinds of ``target``; the relay fans them out to the events streams only
(docs/ingest.md, Producer library).

Other drivers (docs/ingest.md, Producer library): ``target`` may also be a
``psycopg.AsyncConnection`` or a SQLAlchemy ``AsyncSession`` / ``AsyncConnection``
(:mod:`awooop.producer.targets`), with the same guarantees; :mod:`awooop.producer.sync` is the
same API for sync connections (psycopg, SQLAlchemy, Django).
"""

from __future__ import annotations

import uuid
import weakref
from collections.abc import Sequence
from typing import Any

import msgspec

from awooop.core.config import Settings, load_settings
from awooop.core.db import Connection as Connection
from awooop.core.db import Database
from awooop.core.errors import ProducerTransactionError
from awooop.core.pools import SET_TENANT
from awooop.core.pools import create_service_pool as create_pool
from awooop.core.pools import init_service_connection as init_connection
from awooop.core.querier import Querier
from awooop.core.retries import unavailable_on_connection_errors
from awooop.core.telemetry import tracer
from awooop.eventlog import eventlog
from awooop.ingest import ingest_write, submission
from awooop.ingest.cache import ConfigCache
from awooop.ingest.credentials import check_contract_id, check_project_id
from awooop.ingest.domain_events import (
    DOMAIN_STREAM_PREFIX as DOMAIN_STREAM_PREFIX,
)
from awooop.ingest.domain_events import DomainEvent as DomainEvent
from awooop.ingest.domain_events import Emitted as Emitted
from awooop.ingest.domain_events import check_domain_event as check_domain_event
from awooop.ingest.domain_events import domain_stream_id as domain_stream_id
from awooop.ingest.service import Ingestor
from awooop.ingest.submission import ChannelEvent, Submitted
from awooop.producer.bound import in_transaction, producer_errors
from awooop.producer.targets import AsyncTarget, bind
from awooop.producer.tenant_transaction import transaction as transaction
from awooop.runs import signals

__all__ = [
    "ChannelEvent",
    "DomainEvent",
    "Emitted",
    "Submitted",
    "check_domain_event",
    "create_pool",
    "domain_stream_id",
    "emit",
    "emit_many",
    "init_connection",
    "set_tenant",
    "signal",
    "submit",
    "submit_many",
    "transaction",
]

_json_encode = msgspec.json.Encoder().encode
_default_settings: Settings | None = None


async def set_tenant(conn: AsyncTarget, project_id: str) -> None:
    """Set ``awooop.project_id`` for the rest of the caller's open transaction."""
    check_project_id(project_id)
    bound = await bind(conn)
    if not bound.open:
        raise ProducerTransactionError(f"set_tenant needs an open transaction: {bound.hint}")
    with producer_errors():
        await bound.conn.execute(SET_TENANT, project_id)


async def submit(
    target: Database | AsyncTarget,
    project_id: str,
    event: ChannelEvent,
    *,
    contract_id: str = ingest_write.DEFAULT_CONTRACT,
    settings: Settings | None = None,
) -> Submitted:
    """Submit one event; see the module docstring for ``target``."""
    (result,) = await _submit(
        target, project_id, [event], contract_id=contract_id, settings=settings, on_session=True
    )
    return result


async def submit_many(
    target: Database | AsyncTarget,
    project_id: str,
    events: Sequence[ChannelEvent],
    *,
    contract_id: str = ingest_write.DEFAULT_CONTRACT,
    settings: Settings | None = None,
) -> list[Submitted]:
    """Submit a batch in one transaction; one result per event, in order. Everything is
    validated before anything is written: one bad event refuses the whole batch."""
    return await _submit(target, project_id, events, contract_id=contract_id, settings=settings)


async def _submit(
    target: Database | AsyncTarget,
    project_id: str,
    events: Sequence[ChannelEvent],
    *,
    contract_id: str,
    settings: Settings | None,
    on_session: bool = False,
) -> list[Submitted]:
    check_project_id(project_id)
    check_contract_id(contract_id)
    settings = settings or _settings()
    checked = submission.prepare(project_id, contract_id, events)
    if isinstance(target, Database) and on_session:
        return await _ingestor(target, settings).submit(checked, settings)
    where = target if isinstance(target, Database) else await bind(target)
    owner = where if isinstance(where, Database) else where.owner
    cache = _config_cache(owner, settings.ingest_config_cache_s)
    results = await in_transaction(
        where, project_id, lambda conn: submission.write(conn, settings, checked, cache)
    )
    submission.count(checked, results)
    return results


# The Ingestor of submit() per Database, on its tenant sessions: its configuration cache
# keeps what submit() read up to AWOOOP_INGEST_CONFIG_CACHE_S (of the first call's settings),
# like the HTTP server's (awooop/ingest/cache.py), which saves one of the two round trips of a
# submit; a changed dedupe TTL or contract max_attempts applies that much later.
_ingestors: weakref.WeakKeyDictionary[Database, Ingestor] = weakref.WeakKeyDictionary()

# The same for submit_many and for a caller's transaction, kept per Database and per driver
# connection (a configuration is its database's; a pool hands out a new proxy at each acquire,
# but the same connection behind it: Bound.owner): a submit in the caller's transaction then
# costs one statement instead of two. The ingest statement checks the transaction's tenant and the
# login's binding itself on every call (awooop/eventlog/sql/ingest_new.sql), so a cached
# configuration skips no check.
_configs: weakref.WeakKeyDictionary[object, ConfigCache] = weakref.WeakKeyDictionary()


def _config_cache(owner: object, ttl_s: float) -> ConfigCache:
    cache = _configs.get(owner)
    if cache is None or cache.ttl_s != ttl_s:
        cache = _configs[owner] = ConfigCache(ttl_s)
    return cache


def _ingestor(db: Database, settings: Settings) -> Ingestor:
    ingestor = _ingestors.get(db)
    if ingestor is None:
        ingestor = _ingestors[db] = Ingestor(settings, db.sessions, webhooks=False)
    return ingestor


# --- domain events: the rules in awooop.ingest.domain_events ----------------------------


async def emit(
    target: Database | AsyncTarget,
    project_id: str,
    event: DomainEvent,
    *,
    settings: Settings | None = None,
) -> Emitted:
    """Append one domain event; see :func:`emit_many`."""
    (result,) = await emit_many(target, project_id, [event], settings=settings)
    return result


async def emit_many(
    target: Database | AsyncTarget,
    project_id: str,
    events: Sequence[DomainEvent],
    *,
    settings: Settings | None = None,
) -> list[Emitted]:
    """Append domain events, each at the head of its stream, in one transaction; one result
    per event, in order. Everything is validated before anything is written. ``target`` as
    for :func:`submit`:

    - a Database: its own tenant transaction, which first takes a lock per stream
      (:func:`eventlog.lock_heads`) and only then gets its transaction id, so it is newer
      than every earlier writer of those streams: concurrent emitters to one stream queue,
      one commit after another, and none is refused with E-EVENT-002, however many there are
      and however loaded the machine (no retry to exhaust). Deadlocks and serialisation
      failures are retried as for every transaction (:func:`awooop.core.retries.retry_transaction`).
    - the caller's connection inside its open transaction with :func:`set_tenant` done: the
      events commit or roll back with the caller's writes. The same lock orders concurrent
      emitters, but a transaction that already wrote (and so has an id) may be older than
      the stream's last writer: then E-EVENT-002 (retryable), nothing was written, the
      transaction is still usable, and the caller retries its transaction."""
    check_project_id(project_id)
    settings = settings or _settings()
    checked = [check_domain_event(e, settings.http_max_body_bytes) for e in events]
    streams: dict[str, list[int]] = {}
    for index, event in enumerate(events):
        streams.setdefault(event.stream, []).append(index)

    async def run(conn: Querier) -> list[Emitted]:
        results: list[Emitted | None] = [None] * len(events)
        with tracer.start_as_current_span(
            "emit", attributes={"awooop.project_id": project_id, "awooop.source": "producer"}
        ):
            metadata = ingest_write.trace_metadata("producer")
            await eventlog.lock_heads(conn, [domain_stream_id(project_id, s) for s in streams])
            for stream in sorted(streams):  # one row-lock order for concurrent callers
                stream_id = domain_stream_id(project_id, stream)
                indexes = streams[stream]
                appended = await eventlog.append_at_head(
                    conn, stream_id, project_id, [checked[i] for i in indexes], metadata
                )
                for index, row in zip(indexes, appended, strict=True):
                    results[index] = Emitted(stream_id, row.event_id, row.version, row.position)
        return [r for r in results if r is not None]

    where = target if isinstance(target, Database) else await bind(target)
    return await in_transaction(where, project_id, run)


async def signal(
    target: Database | AsyncTarget,
    project_id: str,
    run_id: uuid.UUID,
    name: str,
    payload: Any = None,
    *,
    key: str,
    settings: Settings | None = None,
) -> signals.Sent:
    """Send signal ``name`` to a run of ``project_id`` (docs/workers.md, Waiting for an event):
    on the caller's connection inside its open transaction the row commits with the caller's
    writes and the ``timers`` loop delivers it; with a Database it is delivered at once when
    the run waits for it. The same ``key`` again is one signal (``duplicate``)."""
    check_project_id(project_id)
    limits = settings or _settings()
    sent_by, max_bytes, kept = (
        "producer",
        limits.signal_payload_max_bytes,
        limits.signals_per_run_max,
    )
    with tracer.start_as_current_span("producer signal", attributes={"awooop.signal": name}):
        if isinstance(target, Database):
            with unavailable_on_connection_errors("the producer's write"):
                return await target.in_tenant(
                    project_id,
                    lambda c: signals.send(
                        c,
                        run_id,
                        name,
                        payload,
                        key=key,
                        sent_by=sent_by,
                        payload_max_bytes=max_bytes,
                        kept_max=kept,
                    ),
                )
        return await in_transaction(
            await bind(target),
            project_id,
            lambda c: signals.send_pending(
                c,
                project_id,
                run_id,
                name,
                payload,
                key=key,
                sent_by=sent_by,
                payload_max_bytes=max_bytes,
                kept_max=kept,
            ),
        )


def _settings() -> Settings:
    global _default_settings  # read the environment once per process, like the CLI does
    if _default_settings is None:
        _default_settings = load_settings()
    return _default_settings
