"""The statements a benchmark's client sends, counted by kind (producer_pool.py): an asyncpg
query logger on every connection, paused while CPU is measured. A query logger costs the client
a context manager, a record and an event-loop callback per statement, which a service without
one does not pay, and which would weigh most on the modes that send the most statements."""

from __future__ import annotations

from collections import Counter
from typing import Any

KINDS = (
    ("BEGIN; SET LOCAL awooop.project_id", "begin_tenant"),
    ("BEGIN", "begin"),
    ("COMMIT", "commit"),
    ("SELECT set_config('awooop.project_id'", "set_tenant"),
    ("SELECT pg_advisory_unlock_all()", "pool_reset"),
    ("RESET ALL", "pool_reset"),
    ("WITH guard AS", "ingest"),
    ("-- ingest.insert_new", "ingest"),
)


def kind(query: str) -> str:
    text = query.lstrip()
    for prefix, name in KINDS:
        if text.startswith(prefix):
            return name
    return "configuration_read" if "AS contract_max_attempts" in text else "other"


class Counted:
    """The statements the client sent, by kind, while not paused."""

    def __init__(self) -> None:
        self.kinds: Counter[str] = Counter()
        self.conns: list[Any] = []
        self.paused = False

    def log(self, logged: Any) -> None:
        self.kinds.update([kind(logged.query)])

    def attach(self, conn: Any) -> None:
        conn = getattr(conn, "_con", conn)  # a pool's proxy: the connection behind it
        self.conns.append(conn)
        if not self.paused:
            conn.add_query_logger(self.log)

    def pause(self) -> None:
        self.paused = True
        for conn in self.conns:
            conn.remove_query_logger(self.log)

    def resume(self) -> None:
        self.paused = False
        for conn in self.conns:
            if not conn.is_closed():
                conn.add_query_logger(self.log)
