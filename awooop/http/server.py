"""The HTTP edge: uvicorn with httptools, and what uvicorn leaves to us.

``awooop serve`` and ``awooop up`` both build their server with :func:`server_config`. The
connection protocol is uvicorn's httptools protocol with four additions (:class:`EdgeProtocol`):

- **Header timeout** (``AWOOOP_HTTP_HEADER_TIMEOUT_S``): a request's head (request line and
  headers) must arrive in full within this time, counted from the connection's start or, on a
  kept-alive connection, from the request's first byte. Otherwise the server answers
  408 ``E-HTTP-408`` (when part of a request arrived; a connection that sent nothing is just
  closed) and closes the connection. uvicorn has no such timeout: its keep-alive timer is reset
  by every byte, so one byte a second holds a connection for ever.
- **Body timeout** (``AWOOOP_HTTP_BODY_TIMEOUT_S``): the whole body must arrive within this
  time after the head. Otherwise 408 ``E-HTTP-408`` if the application has not answered yet,
  and the connection is closed; the application sees a disconnect and writes nothing.
- **Parser refusals are JSON**: a request that httptools cannot parse (two Content-Length
  headers, Content-Length with Transfer-Encoding, a raw non-ASCII byte in the request line, a
  control byte in a header value, an unknown method, ...) gets 400 ``E-HTTP-400`` with the
  parser's reason, instead of uvicorn's plain-text body; a request head over
  :data:`MAX_HEAD_BYTES` gets 431 ``E-HTTP-431`` (httptools sets no limit of its own).
  Either way the connection is closed: the parser's state is unknown after an error.
- **One line per event**: each timeout and each parser refusal is one ``info`` log line
  (``http_read_timeout``, ``http_request_malformed``); none is an error of ours.

A client that goes away is handled in the application (:mod:`awooop.http.app`): one info line
and no answer.

Limits of the body deadline: uvicorn stops reading once 64 KiB of body wait unread, so a route
that does slow work before reading a larger body spends the client's budget (the ingest route
reads the body first); and a pipelined request's body, held back while the request before it
is served, is on the clock too (webhook providers do not pipeline). ``limit_concurrency`` stays
unset on purpose: it would turn slow connections into 503s for everyone else.

Why uvicorn and not another server: hypercorn's ``read_timeout`` is per read (a byte a second
resets it) and its h11 parser is several times slower; granian has a header read timeout but
no body timeout, answers parser errors itself, and runs its own event loop, which ``awooop
up`` (the server, the loops and the workers on one asyncio loop) cannot share. uvicorn with
httptools keeps the fastest parser and the shared loop, and the additions above are a small
subclass whose tests (tests/integration/test_http_edge.py) pin the uvicorn internals it uses.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import httptools
import msgspec
import uvicorn
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from awooop.core.config import Settings
from awooop.core.errors import (
    AwoooPError,
    HeadTooLargeError,
    MalformedRequestError,
    RequestTimeoutError,
)
from awooop.core.logs import get_logger

log = get_logger(__name__)
_encode = msgspec.json.Encoder().encode

MAX_HEAD_BYTES = 64 * 1024  # request line + headers; webhook heads are a few hundred bytes
READ_TIMEOUT_MARK = "awooop.read_timeout"  # in the ASGI scope: the edge closed this request


class _HeadTooLarge(Exception):
    """Raised inside a parser callback; httptools reports it as the error's context."""


class EdgeProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with read timeouts, a head limit and JSON refusals."""

    header_timeout_s: float = 5.0
    body_timeout_s: float = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_timer: asyncio.TimerHandle | None = None
        self._head_bytes = 0
        self._head_started = False

    # --- timers -------------------------------------------------------------------------------

    def _arm(self, seconds: float, phase: str) -> None:
        self._disarm()
        self._read_timer = self.loop.call_later(seconds, self._read_timed_out, phase)

    def _disarm(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _read_timed_out(self, phase: str) -> None:
        self._read_timer = None
        if self.transport.is_closing():
            return
        cycle = self.cycle if phase == "body" else None
        if phase == "header" and not self._head_started:
            self.transport.close()  # a connection that never sent a byte: nothing to answer
            return
        log.info("http_read_timeout", phase=phase, client=_client(self.client))
        if cycle is not None:
            cycle.scope[READ_TIMEOUT_MARK] = phase  # type: ignore[literal-required]  # our mark
            answered = cycle.response_started
            # The application waiting for the body now sees a disconnect and sends nothing.
            cycle.disconnected = True
            cycle.message_event.set()
            if answered:
                self.transport.close()
                return
        self._refuse(RequestTimeoutError(f"the request {phase} did not arrive in time"))

    # --- answers without the application -------------------------------------------------------

    def _refuse(self, error: AwoooPError) -> None:
        body = _encode(error.to_dict())
        head = [STATUS_LINE[error.http_status]]
        for name, value in self.server_state.default_headers:
            head.extend([name, b": ", value, b"\r\n"])
        head.append(
            b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
            % len(body)
        )
        self.transport.write(b"".join(head) + body)
        self.transport.close()

    def send_400_response(self, msg: str) -> None:  # uvicorn's plain-text refusal, never used
        self._refuse(MalformedRequestError(msg))

    # --- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.header_timeout_s, "header")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        # uvicorn's own data_received, with the parser's reason kept for the answer.
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
        except httptools.HttpParserError as exc:
            self._disarm()
            if isinstance(exc.__context__, _HeadTooLarge):
                error: AwoooPError = HeadTooLargeError(limit=MAX_HEAD_BYTES)
            else:
                reason = str(exc.__context__ or exc)[:200]
                error = MalformedRequestError(f"invalid HTTP request: {reason}")
            log.info(
                "http_request_malformed",
                code=error.code,
                reason=error.message,
                client=_client(self.client),
            )
            self._refuse(error)

    # --- parser callbacks ------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_started = True
        self._head_bytes = 0
        if self._read_timer is None:  # a kept-alive connection: the clock starts now
            self._arm(self.header_timeout_s, "header")

    def on_url(self, url: bytes) -> None:
        self._count_head(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value))
        super().on_header(name, value)

    def _count_head(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > MAX_HEAD_BYTES:
            raise _HeadTooLarge

    def on_headers_complete(self) -> None:
        self._arm(self.body_timeout_s, "body")
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()
        self._head_started = False
        super().on_message_complete()


def _client(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "unknown"


def protocol_class(settings: Settings) -> type[EdgeProtocol]:
    """:class:`EdgeProtocol` with the settings' timeouts (uvicorn builds one per connection)."""
    return type(
        "EdgeProtocol",
        (EdgeProtocol,),
        {
            "header_timeout_s": settings.http_header_timeout_s,
            "body_timeout_s": settings.http_body_timeout_s,
        },
    )


class StoppingServer(uvicorn.Server):
    """uvicorn's server that sets ``stopping`` as its shutdown begins (before it waits for
    open connections): an output stream then ends, and its client resumes on another server
    with ``Last-Event-ID``, instead of holding the shutdown for its whole grace."""

    def __init__(self, config: uvicorn.Config, stopping: asyncio.Event) -> None:
        super().__init__(config)
        self.stopping = stopping

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.stopping.set()
        await super().shutdown(sockets)


def server_config(app: Any, settings: Settings, **options: Any) -> uvicorn.Config:
    """The uvicorn configuration both ``awooop serve`` and ``awooop up`` run."""
    return uvicorn.Config(
        app,
        http=protocol_class(settings),
        ws="none",  # no WebSocket routes: an Upgrade request is served as plain HTTP
        lifespan="off",
        log_config=None,
        server_header=False,
        **options,
    )
