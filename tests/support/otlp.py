"""A tiny OTLP/HTTP trace receiver for tests: keeps every POST and decodes it."""

from __future__ import annotations

import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


class Collector:
    """A tiny OTLP/HTTP receiver: keeps every POST to /v1/traces."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.received = threading.Event()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                collector.requests.append(
                    (self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
                collector.received.set()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()
                self.wfile.write(b"")

            def log_message(self, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/v1/traces"

    def spans(self) -> list[Any]:
        """Every span received so far (decoded protobuf Span messages)."""
        found: list[Any] = []
        for _path, headers, body in list(self.requests):
            request = decode(headers, body)
            for resource_spans in request.resource_spans:
                for scope in resource_spans.scope_spans:
                    found.extend(scope.spans)
        return found


def decode(headers: dict[str, str], body: bytes) -> ExportTraceServiceRequest:
    if headers.get("content-encoding") == "gzip":
        body = gzip.decompress(body)
    return ExportTraceServiceRequest.FromString(body)
