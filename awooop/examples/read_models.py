"""An example of a service's read model (docs/consumers.md): open tickets per queue, from the
domain events ``TicketOpened`` and ``TicketClosed`` that a help desk emits::

    await producer.emit(db, "acme", producer.DomainEvent(
        "tickets", "TicketOpened", {"ticket": "T-1", "queue": "billing"}))

Its table is created by the service's migration (``read_models.sql`` beside this file). Run it
beside the built-in projections, and rebuild it::

    awooop projector --projection awooop.examples.read_models:OpenTickets
    awooop replay open_tickets --projection awooop.examples.read_models:OpenTickets --swap

or in the service's own process: ``await Consumer(OpenTickets()).run(stop)``.
"""

from __future__ import annotations

from collections.abc import Sequence

from awooop.consumer import Projection, Record
from awooop.core.db import Connection

# The service's own statement; {table} is the live table or the replay's shadow.
COUNT = """
INSERT INTO {table} AS t (project_id, queue, open) VALUES ($1, $2, $3)
ON CONFLICT (project_id, queue) DO UPDATE SET open = t.open + EXCLUDED.open
"""


class OpenTickets(Projection):
    name = "open_tickets"
    event_types = frozenset({"TicketOpened", "TicketClosed"})
    table = "example_open_tickets"
    key = ("project_id", "queue")
    description = "open tickets per queue"

    async def apply(self, conn: Connection, table: str, records: Sequence[Record]) -> None:
        changes = [
            (r.project_id, r.data["queue"], 1 if r.event_type == "TicketOpened" else -1)
            for r in records
        ]
        await conn.executemany(COUNT.format(table=table), changes)  # one round trip
