"""The producer library for sync code: :mod:`awooop.producer`'s functions, with the same names,
arguments and guarantees, on a sync connection inside the caller's open transaction:

- a ``psycopg.Connection`` (``awooop[psycopg]``);
- a SQLAlchemy ``Session`` or ``Connection`` on the ``postgresql+psycopg`` dialect
  (``awooop[sqlalchemy]``);
- Django's ``connection`` inside ``transaction.atomic()`` (``awooop[django]``)::

      from awooop.producer import sync

      with transaction.atomic():
          sync.set_tenant(connection, "shop")
          Order.objects.create(...)
          sync.submit(connection, "shop", sync.ChannelEvent("api", f"order-{pk}", {...}))

How: the async API's functions are the one implementation. On a sync connection their
statements run at once (:class:`awooop.producer.psycopg_driver.Sync`), so their coroutines
never suspend, and :func:`drive` runs one to its end without an event loop (a coroutine is a
generator: one ``send`` runs it through). Should one ever wait on anything else, :func:`drive`
raises instead of blocking. Any thread, inside a running event loop or not.
"""

from __future__ import annotations

import uuid
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from awooop import producer
from awooop.core.config import Settings
from awooop.ingest import ingest_write
from awooop.ingest.domain_events import DomainEvent, Emitted
from awooop.ingest.submission import ChannelEvent, Submitted
from awooop.producer.targets import SyncTarget, bind_sync
from awooop.runs.signals import Sent

__all__ = [
    "ChannelEvent",
    "DomainEvent",
    "Emitted",
    "Sent",
    "Submitted",
    "drive",
    "emit",
    "emit_many",
    "set_tenant",
    "signal",
    "submit",
    "submit_many",
]

T = TypeVar("T")


def drive(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine``, which never suspends, to its end and return its result."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coroutine.close()
    raise RuntimeError("a sync producer call waited on something: this is a bug in awooop")


def set_tenant(conn: SyncTarget, project_id: str) -> None:
    """Set ``awooop.project_id`` for the rest of the caller's open transaction."""
    drive(producer.set_tenant(bind_sync(conn), project_id))


def submit(
    conn: SyncTarget,
    project_id: str,
    event: ChannelEvent,
    *,
    contract_id: str = ingest_write.DEFAULT_CONTRACT,
    settings: Settings | None = None,
) -> Submitted:
    """:func:`awooop.producer.submit` in the caller's transaction."""
    return drive(
        producer.submit(
            bind_sync(conn), project_id, event, contract_id=contract_id, settings=settings
        )
    )


def submit_many(
    conn: SyncTarget,
    project_id: str,
    events: Sequence[ChannelEvent],
    *,
    contract_id: str = ingest_write.DEFAULT_CONTRACT,
    settings: Settings | None = None,
) -> list[Submitted]:
    """:func:`awooop.producer.submit_many` in the caller's transaction."""
    return drive(
        producer.submit_many(
            bind_sync(conn), project_id, events, contract_id=contract_id, settings=settings
        )
    )


def emit(
    conn: SyncTarget, project_id: str, event: DomainEvent, *, settings: Settings | None = None
) -> Emitted:
    """:func:`awooop.producer.emit` in the caller's transaction."""
    return drive(producer.emit(bind_sync(conn), project_id, event, settings=settings))


def emit_many(
    conn: SyncTarget,
    project_id: str,
    events: Sequence[DomainEvent],
    *,
    settings: Settings | None = None,
) -> list[Emitted]:
    """:func:`awooop.producer.emit_many` in the caller's transaction."""
    return drive(producer.emit_many(bind_sync(conn), project_id, events, settings=settings))


def signal(
    conn: SyncTarget,
    project_id: str,
    run_id: uuid.UUID,
    name: str,
    payload: Any = None,
    *,
    key: str,
    settings: Settings | None = None,
) -> Sent:
    """:func:`awooop.producer.signal` in the caller's transaction (the timers loop delivers
    it once the transaction commits)."""
    return drive(
        producer.signal(
            bind_sync(conn), project_id, run_id, name, payload, key=key, settings=settings
        )
    )
