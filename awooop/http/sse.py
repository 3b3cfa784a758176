"""Server-sent events: the encoding of one event, and :class:`EventStream`, the ASGI response
that sends them.

Why not Starlette's ``StreamingResponse``: every ``send`` here is bounded
(:data:`SEND_TIMEOUT_S`: a client that stops reading while the socket's buffer is full is
dropped, nothing piles up for it), the stream ends when the client goes away (the events'
producer is cancelled at once, also while it waits for a notice), and a callback runs once at
the end whatever happened (the stream's slot is given back).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from awooop.core.logs import get_logger

log = get_logger(__name__)
_encode = msgspec.json.Encoder().encode

SEND_TIMEOUT_S = 30.0  # the longest one event may wait for the client to take it
HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-store"),
    (b"x-accel-buffering", b"no"),  # a proxy in front must not hold the events back
    (b"x-content-type-options", b"nosniff"),
]


def event(name: str, data: Any, event_id: int | None = None) -> bytes:
    """Pure: one event; ``data`` as one line of JSON (JSON escapes every newline)."""
    head = b"" if event_id is None else b"id: %d\n" % event_id
    return head + b"event: " + name.encode() + b"\ndata: " + _encode(data) + b"\n\n"


def comment(text: str) -> bytes:
    """Pure: a comment line (a keep-alive: clients ignore it, proxies see traffic)."""
    return b": " + text.encode() + b"\n\n"


def retry(ms: int) -> bytes:
    """Pure: how long a client waits before it reconnects (EventSource's ``retry``)."""
    return b"retry: %d\n\n" % ms


class EventStream(Response):
    """An ASGI response of server-sent events from ``events``; ``on_close`` runs at the end
    (a :class:`Response` for the routes' types; only its ``__call__`` is used)."""

    def __init__(
        self,
        events: AsyncIterator[bytes],
        on_close: Callable[[], None],
        *,
        headers: dict[str, str] | None = None,
        send_timeout_s: float = SEND_TIMEOUT_S,
    ) -> None:
        self.status_code = 200
        self.background = None
        self.events = events
        self.on_close = on_close
        self.raw_headers = HEADERS + [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
        self.send_timeout_s = send_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            pump = asyncio.ensure_future(self._pump(send))
            gone = asyncio.ensure_future(_disconnected(receive))
            try:
                await asyncio.wait({pump, gone}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (pump, gone):
                    task.cancel()
                    with contextlib.suppress(BaseException):
                        await task
        finally:
            with contextlib.suppress(BaseException):
                await self.events.aclose()  # type: ignore[attr-defined]  # an async generator
            self.on_close()

    async def _pump(self, send: Send) -> None:
        bound = self.send_timeout_s
        await asyncio.wait_for(
            send({"type": "http.response.start", "status": 200, "headers": self.raw_headers}), bound
        )
        try:
            async for chunk in self.events:
                await asyncio.wait_for(
                    send({"type": "http.response.body", "body": chunk, "more_body": True}), bound
                )
        except TimeoutError:
            log.info("output_stream_client_too_slow", seconds=bound)
            return
        await asyncio.wait_for(
            send({"type": "http.response.body", "body": b"", "more_body": False}), bound
        )


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
