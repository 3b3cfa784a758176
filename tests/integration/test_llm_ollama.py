"""The Ollama-compatible client against a real HTTP server speaking Ollama's API."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from awooop.core.config import Settings
from awooop.core.errors import ModelResponseError, ModelUnavailableError
from awooop.llm.client import ModelRequest
from awooop.llm.gateway import ModelGateway
from awooop.llm.ollama import OllamaClient
from awooop.revisions.service import Revisions
from awooop.services import Services
from tests.support.revisions import publish_outbox, set_epoch
from tests.support.services import free_port
from tests.support.waiting import eventually


class FakeOllama:
    """Answers /api/generate and /api/chat like Ollama; the model name picks misbehaviour."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.client_ports: list[int] = []
        self.port = free_port()
        self.app = Starlette(
            routes=[
                Route("/api/generate", self.generate, methods=["POST"]),
                Route("/api/chat", self.chat, methods=["POST"]),
            ]
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _misbehave(self, payload: dict[str, Any]) -> Response | None:
        model = payload["model"]
        if model == "slow":
            await asyncio.sleep(2)  # past the 0.3 s client timeout of the slow-server test
        if model == "broken":
            return JSONResponse({"error": "llama runner crashed"}, status_code=500)
        if model == "missing":
            return JSONResponse({"error": "model 'missing' not found"}, status_code=404)
        if model == "garbage":
            return PlainTextResponse("not json")
        return None

    async def generate(self, request: Request) -> Response:
        payload = await request.json()
        self.requests.append(payload)
        assert request.client is not None
        self.client_ports.append(request.client.port)
        bad = await self._misbehave(payload)
        if bad is not None:
            return bad
        await asyncio.sleep(0.01)  # a call takes a moment, so concurrent calls overlap
        return JSONResponse(
            {
                "model": payload["model"],
                "response": f"gen:{payload['prompt']}",
                "done": True,
                "prompt_eval_count": 26,
                "eval_count": 290,
            }
        )

    async def chat(self, request: Request) -> Response:
        payload = await request.json()
        self.requests.append(payload)
        bad = await self._misbehave(payload)
        if bad is not None:
            return bad
        last = payload["messages"][-1]["content"]
        return JSONResponse(
            {
                "model": payload["model"],
                "message": {"role": "assistant", "content": f"chat:{last}"},
                "done": True,
            }
        )


@pytest.fixture
async def ollama() -> AsyncIterator[FakeOllama]:
    fake = FakeOllama()
    config = uvicorn.Config(
        fake.app, host="127.0.0.1", port=fake.port, log_level="error", lifespan="off"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    # uvicorn offers a flag, not an event, for "listening"
    await eventually(lambda: server.started, interval_s=0.01, what="the fake Ollama listening")
    yield fake
    server.should_exit = True
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=10)


def request(model: str = "m", **kw: Any) -> ModelRequest:
    return ModelRequest(model=model, prompt=kw.pop("prompt", "hello"), **kw)


async def test_generate_and_chat(ollama: FakeOllama) -> None:
    client = OllamaClient(ollama.url, timeout_s=5, max_connections=4)
    try:
        generated = await client.generate(request(system="s", options={"temperature": 0}))
        chatted = await client.generate(request(model="c", api="chat", prompt="hey"))
    finally:
        await client.aclose()
    assert (generated.text, generated.model) == ("gen:hello", "m")
    assert (chatted.text, chatted.model) == ("chat:hey", "c")
    # The server's own token counts; an answer without them has none.
    assert (generated.input_tokens, generated.output_tokens) == (26, 290)
    assert (chatted.input_tokens, chatted.output_tokens) == (None, None)
    assert ollama.requests[0] == {
        "model": "m",
        "prompt": "hello",
        "stream": False,
        "system": "s",
        "options": {"temperature": 0},
    }
    assert ollama.requests[1]["messages"] == [{"role": "user", "content": "hey"}]


async def test_connections_are_pooled_and_bounded(ollama: FakeOllama) -> None:
    client = OllamaClient(ollama.url, timeout_s=5, max_connections=3)
    try:
        for _ in range(10):
            await client.generate(request())
        assert len(set(ollama.client_ports)) == 1  # keep-alive: one connection reused
        ollama.client_ports.clear()
        await asyncio.gather(*(client.generate(request()) for _ in range(30)))
        assert 1 <= len(set(ollama.client_ports)) <= 3  # never more than max_connections
    finally:
        await client.aclose()


async def test_a_slow_server_times_out_as_unavailable(ollama: FakeOllama) -> None:
    client = OllamaClient(ollama.url, timeout_s=0.3, max_connections=2)
    try:
        with pytest.raises(ModelUnavailableError) as info:
            await client.generate(request(model="slow"))
    finally:
        await client.aclose()
    assert (info.value.code, info.value.http_status, info.value.retryable) == (
        "E-LLM-001",
        503,
        True,
    )


@pytest.mark.parametrize("model", ["broken", "missing", "garbage"])
async def test_error_answers_are_model_response_errors(ollama: FakeOllama, model: str) -> None:
    client = OllamaClient(ollama.url, timeout_s=5, max_connections=2)
    try:
        with pytest.raises(ModelResponseError) as info:
            await client.generate(request(model=model))
    finally:
        await client.aclose()
    assert info.value.code == "E-LLM-002"


async def test_an_unreachable_server_is_unavailable() -> None:
    client = OllamaClient(f"http://127.0.0.1:{free_port()}", timeout_s=2, max_connections=2)
    try:
        with pytest.raises(ModelUnavailableError):
            await client.generate(request())
    finally:
        await client.aclose()


async def test_the_gateway_routes_to_ollama_through_the_topology(
    settings: Settings, ollama: FakeOllama
) -> None:
    services = await Services.open(settings, db_pool_size=2)
    gateway = ModelGateway(services)
    try:
        await set_epoch(services.redis, services.keys)
        await gateway.start()
        revisions = Revisions(services.db)
        policy = await revisions.create(
            "p1", "policy_routing", "default", {"model": "qwen", "api": "chat", "system": "x"}
        )
        await revisions.activate("p1", "policy_routing", "default", policy.revision_id)
        local = await gateway.complete("p1", "hi")
        assert local.text.startswith("local:qwen@")
        topology = await revisions.create(
            "__platform__", "platform_resource", "ollama_topology", {"url": ollama.url}
        )
        await revisions.activate(
            "__platform__", "platform_resource", "ollama_topology", topology.revision_id
        )
        await publish_outbox(services.db, services.redis, services.keys)
        await eventually(
            lambda: gateway.client_instances == 2,
            interval_s=0.01,
            what="the client rebuilt for the Ollama topology",
        )
        remote = await gateway.complete("p1", "hi", temperature=0.5)
        assert (remote.text, remote.model, remote.revision_id) == (
            "chat:hi",
            "qwen",
            policy.revision_id,
        )
        assert ollama.requests[-1]["options"] == {"temperature": 0.5}
        assert msgspec.json.encode(ollama.requests[-1]["messages"][0]) == (
            b'{"role":"system","content":"x"}'
        )
    finally:
        await gateway.close()
        await services.close()
