"""A service's own projection (docs/consumers.md): what a service subclasses to build a read
model of its own from the event log, run by ``awooop projector`` beside the built-in ones,
rebuilt by ``awooop replay``, or consumed in the service's own process (``awooop.consumer``).

A projection declares

- ``name``: lower-case letters, digits and ``_`` (it names the consumer group
  ``projector:<name>``, the checkpoint rows and the loops);
- ``event_types``: the types it handles; events of other types in the streams it follows are
  passed over (its checkpoint still moves past them);
- ``streams``: the prefix of the stream ids it follows, ``domain/`` (every project's domain
  streams, :func:`awooop.producer.emit`) unless it says otherwise (``run-``, ``revision-``);
- ``table``: the table its view lives in, which the service's own migration creates, with a
  ``project_id`` column and row-level security (``SELECT awooop_enforce_tenant_isolation(...)``),
  and ``key``, its primary key columns (the replay compares rows on them); or no table for a
  consumer that only acts on events (it cannot be rebuilt);
- :meth:`Projection.apply`, which writes the view for a batch of events, on the connection it
  is given, inside the transaction in which the runtime then stores the checkpoint. It is
  called with each stream's events in order, once per event (a redelivery is recognised
  from the checkpoint before ``apply`` sees it), and with a shadow table's name while the
  replay rebuilds the view.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import msgspec

from awooop.core.events import DOMAIN_PREFIX, Event

if TYPE_CHECKING:
    from awooop.core.db import Connection


class Record(msgspec.Struct, frozen=True, kw_only=True):
    """One event of the log, as a service's projection or consumer receives it."""

    stream_id: str  # e.g. "domain/shop/orders"
    version: int  # the event's place in its stream: 1, 2, ...
    project_id: str
    position: int  # the event's place in the whole log (increasing within a stream)
    event_type: str
    data: dict[str, Any]  # a domain event's JSON object; a runtime event's fields
    event: Event | None = None  # the runtime event (None for a domain event)
    traceparent: str | None = None  # the W3C trace context of the write that appended it

    @property
    def stream(self) -> str:
        """A domain stream's name (``orders`` of ``domain/shop/orders``); the stream id else."""
        own = f"{DOMAIN_PREFIX}{self.project_id}/"
        return self.stream_id.removeprefix(own)


class Projection:
    """Subclass and register it (docs/consumers.md); see the module docstring."""

    name: ClassVar[str]
    event_types: ClassVar[frozenset[str]]
    streams: ClassVar[str] = DOMAIN_PREFIX
    table: ClassVar[str | None] = None
    key: ClassVar[tuple[str, ...]] = ()
    description: ClassVar[str] = ""

    async def apply(self, conn: Connection, table: str, records: Sequence[Record]) -> None:
        """Write the view rows of ``records`` (each stream's in version order) into ``table``
        (the live table, or the replay's shadow; empty for a projection without a table),
        inside the caller's transaction: raise to roll back, and the events come again."""
        raise NotImplementedError
