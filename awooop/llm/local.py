"""The deterministic local model: for tests, the demo and benchmarks (``AWOOOP_LLM_URL=local:``).

The answer is a pure function of (model, system, prompt, revision): ``local:<model>@<revision>
<16 hex digits of SHA-256>``, so a test can tell which policy revision served a call. Its token
counts are as deterministic (:func:`local_tokens`: whitespace-separated words).
``local:?delay_ms=N`` sleeps N ms per call to stand in for model latency.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from urllib.parse import parse_qs, urlsplit

from awooop.core.errors import ConfigError
from awooop.llm.client import ModelRequest, ModelResponse


def local_completion(
    model: str, system: str | None, prompt: str, revision_id: uuid.UUID | None
) -> str:
    digest = hashlib.sha256(
        "\x1f".join((model, system or "", prompt, str(revision_id))).encode()
    ).hexdigest()
    return f"local:{model}@{revision_id or 'none'} {digest[:16]}"


def local_tokens(*texts: str | None) -> int:
    """Pure: the local model's token count of ``texts``: their whitespace-separated words."""
    return sum(len(t.split()) for t in texts if t)


def parse_delay_ms(url: str) -> float:
    query = parse_qs(urlsplit(url).query)
    values = query.get("delay_ms", ["0"])
    try:
        delay = float(values[-1])
    except ValueError:
        raise ConfigError(f"local model URL {url!r}: delay_ms must be a number") from None
    if delay < 0:
        raise ConfigError(f"local model URL {url!r}: delay_ms must not be negative")
    return delay


class LocalModel:
    def __init__(self, url: str = "local:") -> None:
        self.url = url
        self.delay_s = parse_delay_ms(url) / 1000.0
        self.calls = 0
        self.closed = False

    async def generate(self, request: ModelRequest) -> ModelResponse:
        if self.delay_s > 0:
            await asyncio.sleep(self.delay_s)
        self.calls += 1
        text = local_completion(request.model, request.system, request.prompt, request.revision_id)
        return ModelResponse(
            text=text,
            model=request.model,
            input_tokens=local_tokens(request.system, request.prompt),
            output_tokens=local_tokens(text),
        )

    async def aclose(self) -> None:
        self.closed = True
