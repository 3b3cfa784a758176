"""The producer library (R-06): channel events from Python services, without HTTP.

:func:`submit` (one event) and :func:`submit_many` (a batch) run the same ingest transaction
as the HTTP server (:mod:`awooop.ingest.store`): dedupe row, run (PENDING) and ``RunCreated``
event, which is the outbox entry the relay publishes. They take either

- a :class:`~awooop.db.Database`: :func:`submit_many` opens its own tenant transaction (and
  retries transient conflicts); :func:`submit` (one event) needs no transaction and uses a
  tenant session (``Database.sessions``, as the HTTP server does): the configuration read
  (cached for ``AWOOOP_INGEST_CONFIG_CACHE_S``, as the HTTP server caches it) and ONE
  statement that writes the dedupe row, the run and its event, instead of five round trips.
  (A key whose dedupe row expired takes a second round: its old row is deleted, then the run
  is written; should that fail between the two, retrying the call writes it.) Or
- the caller's own asyncpg connection **inside its open transaction**: the event commits or
  rolls back together with the caller's own writes (the point of a transactional outbox).
  The transaction must carry the tenant, i.e. ``awooop.project_id`` set to the event's
  project, which :func:`set_tenant` does::

      async with conn.transaction():              # READ COMMITTED, the default
          await producer.set_tenant(conn, "shop")
          await conn.execute("INSERT INTO orders ...")
          result = await producer.submit(
              conn, "shop", producer.ChannelEvent("api", f"order-{order_id}", {"order": order_id})
          )
      # result.run_id; result.created is False when the key was seen within the TTL

  The connecting role needs the runtime's table privileges (``GRANT awooop_app TO
  my_service``); row-level security then limits it to the project set by ``set_tenant``.
  Under REPEATABLE READ or SERIALIZABLE, a repeat of a key that another transaction
  committed after the caller's snapshot raises Postgres' serialization failure
  (``asyncpg.SerializationError``; the dedupe insert cannot use a row its snapshot does not
  see): retry the transaction, or use READ COMMITTED. Should a conflicting row stay
  invisible anyway, the call raises :class:`DedupeRaceError` (E-INGEST-002, retryable)
  rather than answer without a run_id.

The result says whether this call created the run; a repeat returns the existing run_id
(the producer's equivalent of HTTP's 200 E-IDEMPOTENT-001). Metrics count a created event
when the call returns, before the caller's transaction commits.
"""

from __future__ import annotations

import uuid
import weakref
from collections.abc import Sequence
from typing import Any

import msgspec

from awooop import metrics
from awooop.config import Settings, load_settings
from awooop.db import SET_TENANT, Connection, Database
from awooop.errors import InvalidInputError, ProducerTransactionError
from awooop.ingest import store
from awooop.ingest.cache import ConfigCache
from awooop.ingest.common import ParsedEvent, check_storable, event_id
from awooop.ingest.credentials import check_channel, check_contract_id, check_project_id
from awooop.telemetry import tracer

_json_encode = msgspec.json.Encoder().encode
_default_settings: Settings | None = None


class ChannelEvent(msgspec.Struct, frozen=True):
    """An event to submit: its channel, its idempotency id within the channel, the run input."""

    channel_type: str
    provider_event_id: str
    input: Any


class Submitted(msgspec.Struct, frozen=True):
    provider_event_id: str
    run_id: uuid.UUID
    created: bool


async def set_tenant(conn: Connection, project_id: str) -> None:
    """Set ``awooop.project_id`` for the rest of the caller's open transaction."""
    check_project_id(project_id)
    if not conn.is_in_transaction():
        raise ProducerTransactionError("set_tenant needs an open transaction (conn.transaction())")
    await conn.execute(SET_TENANT, project_id)


async def submit(
    target: Database | Connection,
    project_id: str,
    event: ChannelEvent,
    *,
    contract_id: str = store.DEFAULT_CONTRACT,
    settings: Settings | None = None,
) -> Submitted:
    """Submit one event; see the module docstring for ``target``."""
    (result,) = await _submit(
        target, project_id, [event], contract_id=contract_id, settings=settings, on_session=True
    )
    return result


async def submit_many(
    target: Database | Connection,
    project_id: str,
    events: Sequence[ChannelEvent],
    *,
    contract_id: str = store.DEFAULT_CONTRACT,
    settings: Settings | None = None,
) -> list[Submitted]:
    """Submit a batch in one transaction; one result per event, in order. Everything is
    validated before anything is written: one bad event refuses the whole batch."""
    return await _submit(target, project_id, events, contract_id=contract_id, settings=settings)


async def _submit(
    target: Database | Connection,
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
    groups: dict[str, list[tuple[int, ParsedEvent]]] = {}
    for index, event in enumerate(events):
        groups.setdefault(check_channel(event.channel_type), []).append((index, _parsed(event)))

    cache = (
        _session_configs(target, settings) if isinstance(target, Database) and on_session else None
    )

    async def run(conn: Connection) -> list[Submitted]:
        results: list[Submitted | None] = [None] * len(events)
        with tracer.start_as_current_span(
            "ingest",
            attributes={"awooop.project_id": project_id, "awooop.source": "producer"},
        ):
            metadata = store.trace_metadata("producer")
            for channel_type in sorted(groups):  # one lock order across channels too
                key = (project_id, channel_type, contract_id, None)
                config = cache.get(key) if cache is not None else None
                if config is None:
                    config = await store.load_config(
                        conn, settings, project_id, channel_type, contract_id
                    )
                    if config.tenant != project_id:
                        raise ProducerTransactionError(
                            f"the transaction's awooop.project_id is {config.tenant!r}, "
                            f"not {project_id!r}: call set_tenant(conn, project_id) first"
                        )
                    if cache is not None:
                        cache.put(key, config)
                group = groups[channel_type]
                outcomes = await store.ingest(
                    conn,
                    project_id,
                    channel_type,
                    [p for _, p in group],
                    config=config,
                    contract_id=contract_id,
                    metadata=metadata,
                )
                for (index, _), outcome in zip(group, outcomes, strict=True):
                    results[index] = Submitted(
                        outcome.provider_event_id, outcome.run_id, outcome.created
                    )
        return [r for r in results if r is not None]

    if isinstance(target, Database) and on_session:
        results = await target.sessions.run(project_id, run)
    elif isinstance(target, Database):
        results = await target.in_tenant(project_id, run)
    else:
        if not target.is_in_transaction():
            raise ProducerTransactionError(
                "pass a Database, or a connection inside its open transaction"
            )
        results = await run(target)
    for channel_type, group in groups.items():
        created = sum(1 for index, _ in group if results[index].created)
        if created:
            metrics.INGEST_EVENTS.labels(channel_type, "created").inc(created)
        if len(group) - created:
            metrics.INGEST_EVENTS.labels(channel_type, "duplicate").inc(len(group) - created)
    return results


# The channel configurations that submit() read on tenant sessions, per Database: kept up to
# AWOOOP_INGEST_CONFIG_CACHE_S like the HTTP server's (awooop/ingest/cache.py), which saves one
# of the two round trips of a submit; a changed dedupe TTL or contract max_attempts applies
# that much later. (submit_many and a caller's transaction read the configuration each time.)
_configs: weakref.WeakKeyDictionary[Database, ConfigCache] = weakref.WeakKeyDictionary()


def _session_configs(db: Database, settings: Settings) -> ConfigCache:
    cache = _configs.get(db)
    if cache is None:
        cache = _configs[db] = ConfigCache(settings.ingest_config_cache_s)
    return cache


def _parsed(event: ChannelEvent) -> ParsedEvent:
    key = event_id(event.provider_event_id, "provider_event_id")
    try:
        _json_encode(event.input)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidInputError(f"the event input is not JSON-serialisable: {exc}") from None
    check_storable(event.input)
    return ParsedEvent(key, event.input)


def _settings() -> Settings:
    global _default_settings  # read the environment once per process, like the CLI does
    if _default_settings is None:
        _default_settings = load_settings()
    return _default_settings
