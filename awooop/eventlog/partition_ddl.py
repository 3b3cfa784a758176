"""The statements that detach, re-attach and drop one partition of a time-partitioned table: the
log (``awooop_events``, archived by :mod:`awooop.eventlog.archive`) and the dedupe table
(``awooop_channel_event_dedupe``, dropped by :mod:`awooop.eventlog.dedupe_windows`).

DDL takes no parameters, so partition names go into the text: each is checked against its
table's naming pattern (``<parent>_pYYYYMMDD``, as the migrations' create functions name them)
before it is quoted. Detaching is ``CONCURRENTLY`` (writers and readers go on; it cannot run in
a transaction block, and a cancelled one is left pending until ``FINALIZE``). A detached table
is read by its owner: :meth:`PartitionedTable.no_force` lifts the row-level security forced on
it first, and :meth:`PartitionedTable.force` puts it back before a re-attached partition serves
again.
"""

from __future__ import annotations

import re
from datetime import datetime

# --- SQL -------------------------------------------------------------------------------------
# Partitions of $1 whose DETACH CONCURRENTLY was interrupted (they need FINALIZE).
DETACH_PENDING = """
SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = $1::regclass AND i.inhdetachpending
"""


class PartitionedTable:
    """One partitioned table's partition DDL, by partition name."""

    def __init__(self, parent: str) -> None:
        self.parent = parent
        self.pattern = re.compile(rf"^{re.escape(parent)}_p[0-9]{{8}}$")

    def checked(self, name: str) -> str:
        if not self.pattern.match(name):
            raise ValueError(f"not a partition of {self.parent}: {name!r}")
        return name

    def detach(self, name: str) -> str:
        return f'ALTER TABLE {self.parent} DETACH PARTITION "{self.checked(name)}" CONCURRENTLY'

    def finalize(self, name: str) -> str:
        return f'ALTER TABLE {self.parent} DETACH PARTITION "{self.checked(name)}" FINALIZE'

    def attach(self, name: str, range_from: datetime, range_to: datetime) -> str:
        return (
            f'ALTER TABLE {self.parent} ATTACH PARTITION "{self.checked(name)}" '
            f"FOR VALUES FROM ('{range_from.isoformat()}') TO ('{range_to.isoformat()}')"
        )

    def no_force(self, name: str) -> str:
        return f'ALTER TABLE "{self.checked(name)}" NO FORCE ROW LEVEL SECURITY'

    def force(self, name: str) -> str:
        return f'ALTER TABLE "{self.checked(name)}" FORCE ROW LEVEL SECURITY'

    def select(self, name: str, columns: str) -> str:
        """``SELECT columns FROM`` the (detached) partition; ``columns`` is the caller's text."""
        return f'SELECT {columns} FROM "{self.checked(name)}"'  # noqa: S608 - checked name

    def drop(self, name: str) -> str:
        return f'DROP TABLE "{self.checked(name)}"'


EVENTS = PartitionedTable("awooop_events")
DEDUPE = PartitionedTable("awooop_channel_event_dedupe")
