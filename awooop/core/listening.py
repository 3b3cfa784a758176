"""One ``LISTEN`` connection kept open until a stop: the shape every doorbell of the runtime
listens with (the output bell of the server, the worker's cancel, resume and route notices).

:func:`listen` opens a connection of its own, listens on each channel and waits until the stop
or until the connection drops; then, unless stopped, it waits ``pause_s`` and opens a new one.
Every step on the server is bounded by ``timeout_s``, so a database that stops answering (a
black hole, a connection limit) costs a failed round and a pause, never a listener stuck in a
call, and a stop is seen within a pause. A notice is a doorbell, never data: after each
(re)connection ``on_connected`` runs, because notices sent while it was away are lost.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from typing import Any

from awooop.core.db import Connection
from awooop.core.logs import get_logger
from awooop.core.pools import PLATFORM_ROLE, connect

log = get_logger(__name__)

Notified = Callable[[Any, int, str, object], None]  # asyncpg's listener callback


async def listen(
    database_url: str,
    channels: Mapping[str, Notified],
    stop: asyncio.Event,
    connected: asyncio.Event,
    *,
    name: str,
    timeout_s: float = 10.0,
    pause_s: float = 1.0,
    on_connected: Callable[[], None] | None = None,
) -> None:
    """Listen on ``channels`` until ``stop`` (module doc); ``connected`` is set while a
    connection listens; a failed round logs ``<name>_failed`` and is tried again."""
    while not stop.is_set():
        conn: Connection | None = None
        closed = asyncio.Event()
        try:
            conn = await connect(database_url, PLATFORM_ROLE, timeout_s)
            conn.add_termination_listener(lambda _c, closed=closed: closed.set())
            for channel, notified in channels.items():
                await asyncio.wait_for(conn.add_listener(channel, notified), timeout_s)
            connected.set()
            if on_connected is not None:
                on_connected()
            stopper = asyncio.ensure_future(stop.wait())
            dropped = asyncio.ensure_future(closed.wait())
            try:
                await asyncio.wait({stopper, dropped}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopper.cancel()
                dropped.cancel()
        except Exception as exc:
            log.warning(f"{name}_failed", error=repr(exc))
        finally:
            connected.clear()
            if conn is not None and not conn.is_closed():
                try:
                    await conn.close(timeout=5)
                except Exception:  # a server that no longer answers: just drop it
                    conn.terminate()
        if not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=pause_s)
