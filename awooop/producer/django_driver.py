"""Django's database connection (``awooop[django]``): the producer's statements go through
``connection.cursor()``, inside the caller's ``transaction.atomic()`` block, so they commit or
roll back with the block and pass through Django's own error handling.

The connection must be Django's PostgreSQL backend on psycopg 3 (``awooop[django]`` installs
psycopg): with psycopg2 underneath, or another database, the producer refuses with
E-INGEST-005 naming the fix. Outside ``atomic()`` Django is in autocommit mode, where each
statement would commit on its own: refused with E-INGEST-001.
"""

from __future__ import annotations

from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils.connection import ConnectionProxy

from awooop.core.errors import ProducerConnectionError
from awooop.producer.bound import Bound
from awooop.producer.psycopg_driver import Sync

HINT = "wrap the writes in django.db.transaction.atomic()"


def is_django(target: object) -> bool:
    return isinstance(target, BaseDatabaseWrapper | ConnectionProxy)


def bind(target: Any) -> Bound:
    """Django's ``connection`` (or ``connections[alias]``) bound."""
    wrapper = connections[target.alias]  # the wrapper itself, not the module's proxy
    if wrapper.vendor != "postgresql":
        raise ProducerConnectionError(
            f"Django's {wrapper.vendor} backend: the producer needs PostgreSQL "
            "(django.db.backends.postgresql)"
        )
    wrapper.ensure_connection()
    raw = wrapper.connection
    if type(raw).__module__.split(".")[0] != "psycopg":
        raise ProducerConnectionError(
            "Django's PostgreSQL backend runs on psycopg2 here: the producer needs psycopg 3 "
            "(pip install 'awooop[django]', which installs psycopg; Django uses it when present)"
        )
    return Bound(Sync(wrapper.cursor, raw.adapters), raw, bool(wrapper.in_atomic_block), HINT)
