"""The HTTP edge on the real server (uvicorn + :mod:`awooop.http.server`), over raw sockets.

Each test runs the configuration ``awooop serve`` runs, in this process on a free port, so that
log lines are captured (structlog's and the standard library's, where uvicorn logs) and the
database is the test's own: malformed requests, read timeouts, clients that go away,
non-ASCII Idempotency-Keys, trailing slashes, and slow connections next to a normal client.
"""

from __future__ import annotations

import asyncio
import json
import logging
import statistics
import time
from collections.abc import AsyncIterator, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

import httpx
import msgspec
import pytest
import uvicorn

from awooop.commands.serve import listen_socket
from awooop.http.app import create_app
from awooop.http.server import MAX_HEAD_BYTES, server_config
from tests.support.ingest import Ingest, counts, ingest
from tests.support.logcapture import capture_context_logs
from tests.support.waiting import eventually
from tests.support.webhooks import PROJECT, fresh, sign

__all__ = ["ingest"]  # the fixture, imported from tests.support.ingest

API_PATH = f"/v1/projects/{PROJECT}/channels/api"


@asynccontextmanager
async def edge_server(ingest: Ingest, **overrides: Any) -> AsyncIterator[int]:
    """The server ``awooop serve`` runs, with settings ``overrides``, on a free port."""
    settings = msgspec.structs.replace(ingest.services.settings, **overrides)
    server = uvicorn.Server(server_config(create_app(ingest.services), settings))
    sock = listen_socket("127.0.0.1", 0, reuse_port=False)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:

        def started() -> bool:
            assert not task.done(), "the server exited"
            return bool(server.started)

        await eventually(started, interval_s=0.02, what="the server started")
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 30)
        sock.close()


async def exchange(port: int, request: bytes) -> tuple[int, Any]:
    """Send ``request`` raw; the status and JSON body of the answer, read until the server
    closes the connection (every refusal here closes it)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), 10)  # until EOF
    finally:
        writer.close()
    return parse(raw)


def parse(raw: bytes) -> tuple[int, Any]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    assert headers["content-type"] == "application/json", raw
    return int(lines[0].split()[1]), json.loads(body)


def api_request(ingest: Ingest) -> tuple[bytes, bytes]:
    """A valid API delivery's body and Authorization value."""
    delivery = sign(fresh("api"), ingest.creds["api"])
    return delivery.body, delivery.headers["Authorization"].encode()


def errors_in(logs: list[MutableMapping[str, Any]], caplog: pytest.LogCaptureFixture) -> list[Any]:
    """Every line at warning or above, or with a traceback, from structlog and stdlib."""
    bad: list[Any] = [
        line
        for line in logs
        if line["log_level"] in ("warning", "error", "critical") or "exc_info" in line
    ]
    bad += [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    return bad


# --- requests the HTTP parser refuses ---------------------------------------------------------

MALFORMED = {
    "two Content-Length headers": (
        b"POST /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
        "Duplicate Content-Length",
    ),
    "Content-Length with Transfer-Encoding": (
        b"POST /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n{}",
        "Transfer-Encoding can't be present with Content-Length",
    ),
    "raw UTF-8 in the request line": (
        "GET /healthz/é HTTP/1.1\r\nHost: a\r\n\r\n".encode(),
        "Invalid char in url path",
    ),
    "a control byte in a header value": (
        b"GET /healthz HTTP/1.1\r\nHost: a\r\nX-Note: a\x01b\r\n\r\n",
        "Invalid header value char",
    ),
    "an unknown method": (b"BREW /healthz HTTP/1.1\r\nHost: a\r\n\r\n", "Invalid method"),
}


async def test_each_request_the_parser_refuses_is_400_json_with_a_code(
    ingest: Ingest, caplog: pytest.LogCaptureFixture
) -> None:
    async with edge_server(ingest) as port:
        with capture_context_logs() as logs:
            for name, (request, reason) in MALFORMED.items():
                status, body = await exchange(port, request)
                assert (status, body["code"]) == (400, "E-HTTP-400"), name
                assert body["message"].startswith(f"invalid HTTP request: {reason}"), body
    refusals = [line for line in logs if line["event"] == "http_request_malformed"]
    assert len(refusals) == len(MALFORMED)
    assert all(line["log_level"] == "info" for line in refusals)
    assert errors_in(logs, caplog) == []


async def test_a_request_head_over_the_limit_is_431_json(ingest: Ingest) -> None:
    padding = b"x" * 8000
    count = MAX_HEAD_BYTES // len(padding) + 1
    headers = b"".join(b"X-Pad-%d: %s\r\n" % (i, padding) for i in range(count))
    async with edge_server(ingest) as port:
        status, body = await exchange(port, b"GET /healthz HTTP/1.1\r\n" + headers + b"\r\n")
    assert (status, body["code"]) == (431, "E-HTTP-431")


async def test_a_wrong_method_and_an_unknown_route_are_json_from_the_application(
    ingest: Ingest,
) -> None:
    async with edge_server(ingest) as port, httpx.AsyncClient() as client:
        base = f"http://127.0.0.1:{port}"
        put = await client.put(f"{base}{API_PATH}", content=b"{}")
        missing = await client.get(f"{base}/v2/nothing")
    assert (put.status_code, put.json()["code"]) == (405, "E-HTTP-405")
    assert (missing.status_code, missing.json()["code"]) == (404, "E-HTTP-404")


# --- Idempotency-Key and trailing slashes -----------------------------------------------------


async def test_a_non_ascii_idempotency_key_is_read_as_utf8(ingest: Ingest) -> None:
    async with edge_server(ingest) as port, httpx.AsyncClient() as client:
        for key in ("ключ-1", "é-1", "鍵-🔑"):
            delivery = sign(fresh("api"), ingest.creds["api"])
            headers = {"authorization": delivery.headers["Authorization"].encode()}
            headers["idempotency-key"] = key.encode()
            url = f"http://127.0.0.1:{port}{API_PATH}"
            first = await client.post(url, content=delivery.body, headers=headers)
            again = await client.post(url, content=delivery.body, headers=headers)
            assert first.status_code == 202, first.text
            assert first.json()["results"][0]["provider_event_id"] == key
            assert (again.status_code, again.json()["code"]) == (200, "E-IDEMPOTENT-001")
            assert again.json()["run_id"] == first.json()["run_ids"][0]
    async with ingest.db.platform() as conn:
        stored = await conn.fetch(
            "SELECT DISTINCT provider_event_id FROM awooop_channel_event_dedupe ORDER BY 1"
        )
    assert sorted(r["provider_event_id"] for r in stored) == sorted(["ключ-1", "é-1", "鍵-🔑"])


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (b"\xff\xfe-1", "Idempotency-Key header is not valid UTF-8"),
        (b"caf\xe9", "Idempotency-Key header is not valid UTF-8"),  # latin-1, not UTF-8
        ("ключ".encode() * 65, "Idempotency-Key header is longer than 256 characters"),
    ],
    ids=["not UTF-8", "latin-1", "260 characters"],
)
async def test_a_bad_idempotency_key_is_refused_with_a_code(
    ingest: Ingest, key: bytes, message: str
) -> None:
    delivery = sign(fresh("api"), ingest.creds["api"])
    headers = {"authorization": delivery.headers["Authorization"].encode(), "idempotency-key": key}
    before = await counts(ingest.db)
    async with edge_server(ingest) as port, httpx.AsyncClient() as client:
        response = await client.post(
            f"http://127.0.0.1:{port}{API_PATH}", content=delivery.body, headers=headers
        )
    assert (response.status_code, response.json()["code"]) == (400, "E-INPUT-001")
    assert response.json()["message"] == message
    assert await counts(ingest.db) == before


async def test_a_trailing_slash_is_served_like_the_route_without_it(ingest: Ingest) -> None:
    delivery = sign(fresh("api"), ingest.creds["api"])
    async with edge_server(ingest) as port, httpx.AsyncClient() as client:
        base = f"http://127.0.0.1:{port}"
        slashed = f"{base}{API_PATH}/?contract_id=default"
        posted = await client.post(slashed, content=delivery.body, headers=delivery.headers)
        health = await client.get(f"{base}/healthz/")
    assert posted.status_code == 202, posted.text
    assert health.status_code == 200


# --- clients that go away, and slow clients -------------------------------------------------


async def test_a_client_that_leaves_mid_body_is_one_info_line_and_no_row(
    ingest: Ingest, caplog: pytest.LogCaptureFixture
) -> None:
    before = await counts(ingest.db)
    async with edge_server(ingest) as port:
        with capture_context_logs() as logs:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(
                f"POST {API_PATH} HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
                "Idempotency-Key: half-1\r\nContent-Length: 1000\r\n\r\n".encode()
                + b'{"half": "'
                + b"x" * 200
            )
            await writer.drain()
            await asyncio.sleep(0.2)  # the application is reading the body by now
            writer.close()
            await eventually(
                lambda: any(line["event"] == "http_client_disconnected" for line in logs),
                what="an http_client_disconnected line",
            )
            await asyncio.sleep(0.5)  # room for any later line (an error, a 500) to show
    gone = [line for line in logs if line["event"] == "http_client_disconnected"]
    assert len(gone) == 1 and gone[0]["log_level"] == "info", gone
    assert gone[0]["path"] == API_PATH
    assert errors_in(logs, caplog) == []
    assert await counts(ingest.db) == before


async def test_headers_sent_a_byte_a_second_are_cut_off_at_the_header_timeout(
    ingest: Ingest, caplog: pytest.LogCaptureFixture
) -> None:
    timeout = 2.5
    head = f"POST {API_PATH} HTTP/1.1\r\nHost: a\r\nIdempotency-Key: slow\r\n".encode()
    async with edge_server(ingest, http_header_timeout_s=timeout) as port:
        with capture_context_logs() as logs:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            started = time.monotonic()
            closed_after = None
            for i in range(len(head)):  # never the blank line that ends the head
                writer.write(head[i : i + 1])
                await writer.drain()
                try:
                    first = await asyncio.wait_for(reader.read(65536), 1.0)  # read(n): see below
                except TimeoutError:
                    continue  # still open: the next byte, a second later
                closed_after = time.monotonic() - started
                raw = first + await asyncio.wait_for(reader.read(), 10)
                break
            writer.close()
    assert closed_after is not None, "the server never closed the connection"
    assert timeout * 0.9 <= closed_after < timeout + 10, closed_after
    status, body = parse(raw)
    assert (status, body["code"]) == (408, "E-HTTP-408")
    timeouts = [line for line in logs if line["event"] == "http_read_timeout"]
    assert [(t["phase"], t["log_level"]) for t in timeouts] == [("header", "info")]
    assert errors_in(logs, caplog) == []


async def test_a_connection_that_sends_nothing_is_closed_after_the_header_timeout(
    ingest: Ingest,
) -> None:
    async with edge_server(ingest, http_header_timeout_s=1.0) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        started = time.monotonic()
        assert await asyncio.wait_for(reader.read(), 15) == b""  # closed, nothing said
        assert time.monotonic() - started >= 0.9
        writer.close()


async def test_a_body_that_stalls_is_cut_off_at_the_body_timeout_and_writes_nothing(
    ingest: Ingest, caplog: pytest.LogCaptureFixture
) -> None:
    body, auth = api_request(ingest)
    before = await counts(ingest.db)
    async with edge_server(ingest, http_body_timeout_s=2.0) as port:
        with capture_context_logs() as logs:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(
                f"POST {API_PATH} HTTP/1.1\r\nHost: a\r\nIdempotency-Key: stall-1\r\n"
                f"Content-Length: {len(body)}\r\n".encode()
                + b"Authorization: "
                + auth
                + b"\r\n\r\n"
                + body[:5]
            )
            await writer.drain()
            started = time.monotonic()
            raw = b""
            for byte in body[5:]:  # a byte a second: the deadline is for the whole body
                writer.write(bytes([byte]))
                await writer.drain()
                try:
                    # read(n), not read(): a read until EOF that the timeout cancels loses
                    # what it had read so far (the answer came, but not yet the EOF).
                    first = await asyncio.wait_for(reader.read(65536), 1.0)
                except TimeoutError:
                    continue
                raw = first + await asyncio.wait_for(reader.read(), 10)
                break
            elapsed = time.monotonic() - started
            writer.close()
            await asyncio.sleep(0.5)  # room for the application's lines, if any
    assert 1.8 <= elapsed < 12, elapsed
    status, answer = parse(raw)
    assert (status, answer["code"]) == (408, "E-HTTP-408")
    timeouts = [line for line in logs if line["event"] == "http_read_timeout"]
    assert [(t["phase"], t["log_level"]) for t in timeouts] == [("body", "info")]
    assert not [line for line in logs if line["event"] == "http_client_disconnected"]
    assert errors_in(logs, caplog) == []
    assert await counts(ingest.db) == before


async def test_200_slow_connections_do_not_delay_a_normal_client(ingest: Ingest) -> None:
    """200 connections trickle their heads (a byte a second each) while a normal client posts:
    each of its deliveries is 202 within a second, about as fast as without them."""
    async with edge_server(ingest, http_header_timeout_s=60.0) as port:
        url = f"http://127.0.0.1:{port}{API_PATH}"
        async with httpx.AsyncClient() as client:

            async def post() -> float:
                delivery = sign(fresh("api"), ingest.creds["api"])
                started = time.monotonic()
                response = await client.post(url, content=delivery.body, headers=delivery.headers)
                assert response.status_code == 202, response.text
                return time.monotonic() - started

            await post()  # warm: connection, config cache, statements
            baseline = [await post() for _ in range(10)]

            slow: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
            for _ in range(200):
                slow.append(await asyncio.open_connection("127.0.0.1", port))
            head = f"POST {API_PATH} HTTP/1.1\r\nHost: a\r\nX-Slow: ".encode() + b"y" * 100
            stop = asyncio.Event()

            async def trickle() -> None:
                i = 0
                while not stop.is_set():
                    for _, writer in slow:
                        writer.write(head[i % len(head) : i % len(head) + 1])
                    i += 1
                    await asyncio.sleep(1.0)

            trickling = asyncio.create_task(trickle())
            await asyncio.sleep(1.5)  # every slow connection is mid-head
            loaded = [await post() for _ in range(10)]
            still_open = sum(1 for reader, _ in slow if not reader.at_eof())
            stop.set()
            await trickling
            for _, writer in slow:
                writer.close()
    assert still_open == 200  # they were really there, holding their connections
    # Within a second each; and no slower than the client's own baseline by more than a
    # margin that a loaded 2-core machine gives (a server they blocked would be far past it).
    assert max(loaded) < 1.0, (baseline, loaded)
    assert statistics.median(loaded) < max(0.25, 5 * statistics.median(baseline)), (
        baseline,
        loaded,
    )
