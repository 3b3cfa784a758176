"""The factory that picks a model client from a URL.

``local:`` (optionally ``local:?delay_ms=N``) is the deterministic local model; ``http://`` or
``https://`` is an Ollama-compatible server. A client is built once and reused (connection
pooling); the gateway builds a new one only when the model topology changes (R-25).
"""

from __future__ import annotations

from awooop.core.errors import ConfigError
from awooop.llm.client import ModelClient
from awooop.llm.local import LocalModel
from awooop.llm.ollama import OllamaClient


def build_client(url: str, *, timeout_s: float, max_connections: int) -> ModelClient:
    if url.startswith("local:"):
        return LocalModel(url)
    if url.startswith(("http://", "https://")):
        return OllamaClient(url, timeout_s=timeout_s, max_connections=max_connections)
    raise ConfigError(f"unknown model URL {url!r}: expected local: or http(s)://host:port")
