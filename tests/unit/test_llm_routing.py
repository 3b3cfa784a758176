"""How a policy routes a model call, and the deterministic local model (pure)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from awooop.core.errors import ConfigError
from awooop.llm.gateway import build_request
from awooop.llm.local import LocalModel, jitter_share, local_completion, parse_delay_ms
from awooop.llm.models import build_client
from awooop.llm.ollama import OllamaClient, chat_payload, generate_payload
from awooop.revisions.effective import EffectivePolicy

REV = uuid.UUID("0b8a2c8e-51a4-4c52-9a63-0d3f0bb1f2aa")


def policy(body: dict[str, Any], revision: uuid.UUID | None = REV) -> EffectivePolicy:
    return EffectivePolicy(
        project_id="p",
        contract_family="policy_routing",
        contract_id="default",
        revision_id=revision,
        body=body,
        body_hash=None if revision is None else "sha256:x",
    )


def test_the_policy_chooses_model_api_and_system() -> None:
    request = build_request(
        policy({"model": "qwen", "api": "chat", "system": "be brief"}), "hi", {}, "fallback"
    )
    assert (request.model, request.api, request.system, request.revision_id) == (
        "qwen",
        "chat",
        "be brief",
        REV,
    )


def test_no_policy_means_the_default_model() -> None:
    request = build_request(policy({}, revision=None), "hi", {}, "fallback")
    assert (request.model, request.api, request.revision_id) == ("fallback", "generate", None)


def test_a_route_picks_its_model_and_call_options_override_policy_options() -> None:
    body = {
        "model": "big",
        "routes": {"summarize": "small"},
        "options": {"temperature": 0.7, "num_ctx": 4096},
    }
    request = build_request(policy(body), "x", {"route": "summarize", "temperature": 0}, "f")
    assert request.model == "small"
    assert request.options == {"temperature": 0, "num_ctx": 4096}
    assert build_request(policy(body), "x", {"route": "unknown"}, "f").model == "big"


def test_the_local_model_is_deterministic_and_names_the_revision() -> None:
    a = local_completion("m", None, "hello", REV)
    assert a == local_completion("m", None, "hello", REV)
    assert a.startswith(f"local:m@{REV} ")
    assert a != local_completion("m", None, "hello", uuid.uuid4())
    assert a != local_completion("m", "sys", "hello", REV)
    assert local_completion("m", None, "hello", None).startswith("local:m@none ")


def test_local_urls() -> None:
    assert parse_delay_ms("local:") == 0
    assert parse_delay_ms("local:?delay_ms=1.5") == 1.5
    with pytest.raises(ConfigError):
        parse_delay_ms("local:?delay_ms=soon")
    with pytest.raises(ConfigError):
        parse_delay_ms("local:?delay_ms=-1")


def test_a_prompt_sets_its_share_of_the_jitter() -> None:
    shares = [jitter_share(f"step 0 of run {n}") for n in range(2000)]
    assert shares[0] == jitter_share("step 0 of run 0")  # the same prompt, the same wait
    assert all(0 <= s < 1 for s in shares)
    assert len(set(shares)) == len(shares)
    assert [sum(1 for s in shares if k / 4 <= s < (k + 1) / 4) for k in range(4)] == [
        pytest.approx(500, abs=100)
    ] * 4  # spread evenly


async def test_the_local_model_waits_its_delay_and_the_prompts_share_of_the_jitter() -> None:
    model = LocalModel("local:?delay_ms=10&jitter_ms=40")
    assert (model.delay_s, model.jitter_s) == (0.01, 0.04)
    prompt = min((f"p{n}" for n in range(50)), key=lambda p: abs(jitter_share(p) - 0.9))
    request = build_request(policy({"model": "m"}), prompt, {}, "f")
    started = time.monotonic()
    await model.generate(request)
    assert time.monotonic() - started >= 0.01 + 0.04 * jitter_share(prompt) > 0.04
    with pytest.raises(ConfigError):
        LocalModel("local:?jitter_ms=-5")


async def test_the_factory_picks_the_client_by_url() -> None:
    local = build_client("local:?delay_ms=2", timeout_s=1, max_connections=2)
    assert isinstance(local, LocalModel) and local.delay_s == 0.002
    http = build_client("http://127.0.0.1:1", timeout_s=1, max_connections=2)
    assert isinstance(http, OllamaClient)
    await http.aclose()
    with pytest.raises(ConfigError):
        build_client("ftp://x", timeout_s=1, max_connections=2)


def test_ollama_payloads() -> None:
    request = build_request(
        policy({"model": "m", "system": "s", "options": {"seed": 1}}), "p", {}, "f"
    )
    assert generate_payload(request) == {
        "model": "m",
        "prompt": "p",
        "stream": False,
        "system": "s",
        "options": {"seed": 1},
    }
    assert chat_payload(request) == {
        "model": "m",
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "p"}],
        "stream": False,
        "options": {"seed": 1},
    }
