"""The model client protocol and the factory that picks a client from a URL.

``local:`` (optionally ``local:?delay_ms=N``) is the deterministic local model; ``http://`` or
``https://`` is an Ollama-compatible server. A client is built once and reused (connection
pooling); the gateway builds a new one only when the model topology changes (R-25).
"""

from __future__ import annotations

import uuid
from typing import Any, Literal, Protocol

import msgspec

from awooop.errors import ConfigError

Api = Literal["generate", "chat"]


class ModelRequest(msgspec.Struct, frozen=True, kw_only=True):
    model: str
    prompt: str
    api: Api = "generate"
    system: str | None = None
    options: dict[str, Any] = msgspec.field(default_factory=dict)
    revision_id: uuid.UUID | None = None  # the policy revision that routed this call
    body_hash: str | None = None


class ModelResponse(msgspec.Struct, frozen=True, kw_only=True):
    text: str
    model: str


class ModelClient(Protocol):
    url: str

    async def generate(self, request: ModelRequest) -> ModelResponse: ...

    async def aclose(self) -> None: ...


def build_client(url: str, *, timeout_s: float, max_connections: int) -> ModelClient:
    if url.startswith("local:"):
        from awooop.llm.local import LocalModel

        return LocalModel(url)
    if url.startswith(("http://", "https://")):
        from awooop.llm.ollama import OllamaClient

        return OllamaClient(url, timeout_s=timeout_s, max_connections=max_connections)
    raise ConfigError(f"unknown model URL {url!r}: expected local: or http(s)://host:port")
