"""The model client protocol, its request and its response (clients: :mod:`awooop.llm.models`)."""

from __future__ import annotations

import uuid
from typing import Any, Literal, Protocol

import msgspec

Api = Literal["generate", "chat"]


class ModelRequest(msgspec.Struct, frozen=True, kw_only=True):
    model: str
    prompt: str
    api: Api = "generate"
    system: str | None = None
    options: dict[str, Any] = msgspec.field(default_factory=dict)
    revision_id: uuid.UUID | None = None  # the policy revision that routed this call
    body_hash: str | None = None
    # The policy's ``retry`` section (awooop.worker.policies.with_contract); not sent.
    retry: dict[str, Any] | None = None


class ModelResponse(msgspec.Struct, frozen=True, kw_only=True):
    """A model's answer; the token counts are the model server's own (None: it gave none)."""

    text: str
    model: str
    input_tokens: int | None = None
    output_tokens: int | None = None


class ModelClient(Protocol):
    url: str

    async def generate(self, request: ModelRequest) -> ModelResponse: ...

    async def aclose(self) -> None: ...
