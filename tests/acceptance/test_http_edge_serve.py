"""The HTTP edge of a real `awooop serve` process: timeouts from its environment, JSON
refusals, a client that leaves mid-body, and 200 slow connections next to a normal client,
judged by what the process logs."""

from __future__ import annotations

import json
import signal
import socket
import time
from pathlib import Path

import httpx

from tests.acceptance.test_ingest_serve import cli, env, serve
from tests.support.webhooks import PROJECT, fresh, sign

__all__ = ["env"]  # the fixture, imported from test_ingest_serve

API_PATH = f"/v1/projects/{PROJECT}/channels/api"


def connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=15)


def read_to_eof(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def status_and_code(raw: bytes) -> tuple[int, str]:
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)["code"]


def test_the_edge_of_awooop_serve(env: dict[str, str], tmp_path: Path) -> None:
    result = cli(env, "tokens", "create", PROJECT, "--channel", "api")
    assert result.returncode == 0, result.stderr
    token = result.stdout.strip()
    env = {**env, "AWOOOP_HTTP_HEADER_TIMEOUT_S": "3", "AWOOOP_HTTP_BODY_TIMEOUT_S": "3"}
    log = tmp_path / "serve.log"
    with serve(env, log) as (process, url), httpx.Client(base_url=url) as client:
        # A client that sends half its body and leaves, before any authentication.
        half = connect(url)
        half.sendall(
            f"POST {API_PATH} HTTP/1.1\r\nHost: a\r\nContent-Length: 500\r\n\r\n".encode()
            + b'{"half": '
        )
        time.sleep(0.3)
        half.close()

        # A request the parser refuses.
        bad = connect(url)
        bad.sendall(b"POST /healthz HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n")
        assert status_and_code(read_to_eof(bad)) == (400, "E-HTTP-400")
        bad.close()

        # 200 slow connections, each mid-way through its head, and a normal client.
        slow = [connect(url) for _ in range(200)]
        opened = time.monotonic()
        for sock in slow:
            sock.sendall(f"POST {API_PATH} HTTP/1.1\r\nHost: a\r\nX-Slow: y".encode())
        latencies = []
        for _ in range(10):
            delivery = sign(fresh("api"), token)
            started = time.monotonic()
            response = client.post(delivery.path, content=delivery.body, headers=delivery.headers)
            latencies.append(time.monotonic() - started)
            assert response.status_code == 202, response.text
        assert max(latencies) < 1.0, latencies
        # ... and the slow ones are cut off at the header timeout, each with a 408.
        answers = []
        for sock in slow:
            answers.append(status_and_code(read_to_eof(sock)))
            sock.close()
        cut_after = time.monotonic() - opened
        assert answers == [(408, "E-HTTP-408")] * 200
        assert 2.7 <= cut_after < 20, cut_after

        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert "Traceback" not in log.read_text()
    assert [line for line in lines if line["level"] in ("warning", "error", "critical")] == []
    gone = [line for line in lines if line["event"] == "http_client_disconnected"]
    assert [(g["level"], g["path"]) for g in gone] == [("info", API_PATH)]
    timeouts = [line for line in lines if line["event"] == "http_read_timeout"]
    assert len(timeouts) == 200 and {t["phase"] for t in timeouts} == {"header"}
