"""What the producer's statements need of a connection: four calls in asyncpg's shape.

An asyncpg connection (or a pool's proxy of one) is a :class:`Querier` as it is. The
producer library's executors for other drivers (:mod:`awooop.producer.psycopg_driver`,
:mod:`awooop.producer.django_driver`) are Queriers too, so that the code which decides what
to write (:mod:`awooop.ingest.submission`, :mod:`awooop.ingest.ingest_write`, the log's
appends, :func:`awooop.runs.signals.send_pending`) runs unchanged on any of them. Statements
use ``$1``-style parameters; a row is read by column name (``row["run_id"]``, ``row.get``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class Querier(Protocol):
    async def fetch(self, query: str, *args: Any) -> Sequence[Any]: ...

    async def fetchrow(self, query: str, *args: Any) -> Any: ...

    async def fetchval(self, query: str, *args: Any) -> Any: ...

    async def execute(self, query: str, *args: Any) -> str: ...
