"""An Ollama-compatible model client over HTTP (``/api/generate`` and ``/api/chat``).

One ``httpx.AsyncClient`` per client instance: keep-alive connection pooling bounded by
``max_connections``, a connect timeout of at most 5 s and an overall per-request timeout of
``AWOOOP_LLM_TIMEOUT_S``. Non-streaming requests (``"stream": false``). Errors map to the
catalog: unreachable or timed out is E-LLM-001 (503, retryable), an error status or a
malformed answer is E-LLM-002 (502). The answer's token counts are the server's
``prompt_eval_count`` and ``eval_count`` (None when it leaves them out).
"""

from __future__ import annotations

from typing import Any

import httpx
import msgspec

from awooop.core.errors import ModelResponseError, ModelUnavailableError
from awooop.llm.client import ModelRequest, ModelResponse


class _Generated(msgspec.Struct):
    response: str
    model: str = ""
    prompt_eval_count: int | None = None  # tokens of the prompt
    eval_count: int | None = None  # tokens of the answer


class _Message(msgspec.Struct):
    content: str
    role: str = "assistant"


class _Chatted(msgspec.Struct):
    message: _Message
    model: str = ""
    prompt_eval_count: int | None = None
    eval_count: int | None = None


_generated = msgspec.json.Decoder(_Generated)
_chatted = msgspec.json.Decoder(_Chatted)


def generate_payload(request: ModelRequest) -> dict[str, Any]:
    payload: dict[str, Any] = {"model": request.model, "prompt": request.prompt, "stream": False}
    if request.system is not None:
        payload["system"] = request.system
    if request.options:
        payload["options"] = request.options
    return payload


def chat_payload(request: ModelRequest) -> dict[str, Any]:
    messages = []
    if request.system is not None:
        messages.append({"role": "system", "content": request.system})
    messages.append({"role": "user", "content": request.prompt})
    payload: dict[str, Any] = {"model": request.model, "messages": messages, "stream": False}
    if request.options:
        payload["options"] = request.options
    return payload


class OllamaClient:
    def __init__(self, url: str, *, timeout_s: float, max_connections: int) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.http = httpx.AsyncClient(
            base_url=url.rstrip("/"),
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 5.0)),
            limits=httpx.Limits(
                max_connections=max_connections,
                max_keepalive_connections=max_connections,
                keepalive_expiry=30.0,
            ),
        )

    async def generate(self, request: ModelRequest) -> ModelResponse:
        chat = request.api == "chat"
        path = "/api/chat" if chat else "/api/generate"
        payload = chat_payload(request) if chat else generate_payload(request)
        try:
            response = await self.http.post(path, json=payload)
        except httpx.TimeoutException as exc:
            raise ModelUnavailableError(
                f"model server timed out after {self.timeout_s:g} s", url=self.url
            ) from exc
        except httpx.TransportError as exc:
            raise ModelUnavailableError(
                f"model server unreachable: {type(exc).__name__}", url=self.url
            ) from exc
        if response.status_code != 200:
            raise ModelResponseError(
                f"model server answered {response.status_code}: {response.text[:200]}",
                url=self.url,
                status=response.status_code,
            )
        try:
            if chat:
                chatted = _chatted.decode(response.content)
                return ModelResponse(
                    text=chatted.message.content,
                    model=chatted.model or request.model,
                    input_tokens=chatted.prompt_eval_count,
                    output_tokens=chatted.eval_count,
                )
            generated = _generated.decode(response.content)
            return ModelResponse(
                text=generated.response,
                model=generated.model or request.model,
                input_tokens=generated.prompt_eval_count,
                output_tokens=generated.eval_count,
            )
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise ModelResponseError(f"malformed model answer: {exc}", url=self.url) from exc

    async def aclose(self) -> None:
        await self.http.aclose()
