"""The deterministic local model: for tests, the demo and benchmarks (``AWOOOP_LLM_URL=local:``).

The answer is a pure function of (model, system, prompt, revision): ``local:<model>@<revision>
<16 hex digits of SHA-256>``, so a test can tell which policy revision served a call. Its token
counts are as deterministic (:func:`local_tokens`: whitespace-separated words).
``local:?delay_ms=N`` sleeps N ms per call to stand in for model latency; ``&jitter_ms=J`` adds
a part of J ms in [0, J) set by the prompt (:func:`jitter_share`), so that calls made together
come back spread out, as a real model's do, and a benchmark can tell each call's own time.
``local:?fail_first=N`` fails the first N calls of each prompt (per model and prompt, counted
by the client instance) as a model server answering ``fail_status`` (default 503: E-LLM-002
with a transient status, which run.llm retries) would, then answers: for retry tests.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from urllib.parse import parse_qs, urlsplit

from awooop.core.errors import ConfigError, ModelResponseError
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
    return _number(url, "delay_ms", 0)


def jitter_share(prompt: str) -> float:
    """Pure: the share in [0, 1) of ``jitter_ms`` a call of ``prompt`` waits (from a hash of the
    prompt: the same prompt always waits the same)."""
    return int.from_bytes(hashlib.sha256(prompt.encode()).digest()[:8], "big") / 2**64


def _number(url: str, name: str, default: float) -> float:
    query = parse_qs(urlsplit(url).query)
    values = query.get(name, [str(default)])
    try:
        value = float(values[-1])
    except ValueError:
        raise ConfigError(f"local model URL {url!r}: {name} must be a number") from None
    if value < 0:
        raise ConfigError(f"local model URL {url!r}: {name} must not be negative")
    return value


class LocalModel:
    def __init__(self, url: str = "local:") -> None:
        self.url = url
        self.delay_s = parse_delay_ms(url) / 1000.0
        self.jitter_s = _number(url, "jitter_ms", 0) / 1000.0
        self.fail_first = int(_number(url, "fail_first", 0))
        self.fail_status = int(_number(url, "fail_status", 503))
        self.failed: dict[tuple[str, str], int] = {}  # failures so far, per (model, prompt)
        self.calls = 0
        self.closed = False

    async def generate(self, request: ModelRequest) -> ModelResponse:
        delay = self.delay_s
        if self.jitter_s > 0:
            delay += self.jitter_s * jitter_share(request.prompt)
        if delay > 0:
            await asyncio.sleep(delay)
        self.calls += 1
        key = (request.model, request.prompt)
        if self.failed.get(key, 0) < self.fail_first:
            self.failed[key] = self.failed.get(key, 0) + 1
            raise ModelResponseError(
                f"model server answered {self.fail_status}: local failure {self.failed[key]}"
                f" of {self.fail_first} (fail_first)",
                url=self.url,
                status=self.fail_status,
            )
        text = local_completion(request.model, request.system, request.prompt, request.revision_id)
        return ModelResponse(
            text=text,
            model=request.model,
            input_tokens=local_tokens(request.system, request.prompt),
            output_tokens=local_tokens(text),
        )

    async def aclose(self) -> None:
        self.closed = True
