"""The record of a model call (awooop.llm.calls) and its display (awooop.projections.model_calls):
pure functions."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime
from typing import Any

import msgspec

from awooop.core.errors import ModelResponseError
from awooop.llm.calls import TEXT_CHARS, called_event, outcome_of
from awooop.llm.client import ModelRequest
from awooop.llm.gateway import LLMResult, ModelCall
from awooop.llm.local import local_tokens
from awooop.projections.model_calls import ModelCallLine, TokenTotals, short_hash, token_totals

T0 = datetime(2026, 1, 1, tzinfo=UTC)
REVISION = uuid.UUID("0b8a2c8e-51a4-4c52-9a63-0d3f0bb1f2aa")
REQUEST = ModelRequest(model="asked", prompt="p", revision_id=REVISION, body_hash="sha256:ab")


BASE = ModelCall(
    contract=("policy_routing", "sre"),
    started_at=T0,
    duration_s=0.25,
    request=REQUEST,
    result=None,
    error=None,
)


def call(**changes: Any) -> ModelCall:
    return dataclasses.replace(BASE, **changes)


def test_an_answered_call_names_the_model_that_answered_and_its_revision() -> None:
    answered = LLMResult(text="t", model="answered", revision_id=REVISION, body_hash="sha256:ab")
    event = called_event(call(result=answered), worker_id="w1", attempt=2, at=T0)
    assert (event.model, event.revision_id, event.body_hash) == ("answered", REVISION, "sha256:ab")
    assert (event.contract_family, event.contract_id) == ("policy_routing", "sre")
    assert (event.outcome, event.reason, event.duration_ms) == ("ok", "", 250.0)
    assert (event.worker_id, event.attempt, event.started_at) == ("w1", 2, T0)


def test_a_failed_call_keeps_its_routing_and_its_code() -> None:
    failed = called_event(
        call(error=ModelResponseError("bad \x00 answer")), worker_id="w1", attempt=1, at=T0
    )
    assert (failed.model, failed.revision_id, failed.outcome) == ("asked", REVISION, "E-LLM-002")
    assert failed.reason == "ModelResponseError: bad \\u0000 answer"  # storable
    unrouted = called_event(
        call(request=None, error=ConnectionError()), worker_id="w1", attempt=1, at=T0
    )
    assert (unrouted.model, unrouted.revision_id, unrouted.body_hash) == (None, None, None)
    assert unrouted.outcome == "E-INTERNAL-001" and unrouted.reason == "ConnectionError"


def test_outcome_and_short_hash() -> None:
    assert outcome_of(None) == ("ok", "")
    assert short_hash("sha256:0123456789abcdef") == "0123456789ab"
    assert short_hash("0123456789abcdef") == "0123456789ab"


def test_a_call_keeps_its_prompt_its_answer_and_its_tokens() -> None:
    answered = LLMResult(
        text="the answer",
        model="m",
        revision_id=None,
        body_hash=None,
        input_tokens=12,
        output_tokens=3,
    )
    event = called_event(
        call(request=msgspec.structs.replace(REQUEST, prompt="why?"), result=answered),
        worker_id="w1",
        attempt=1,
        at=T0,
    )
    assert (event.prompt, event.answer) == ("why?", "the answer")
    assert (event.input_tokens, event.output_tokens) == (12, 3)


def test_a_long_prompt_and_answer_are_capped_with_a_marker() -> None:
    long = LLMResult(text="a" * 10_000, model="m", revision_id=None, body_hash=None)
    event = called_event(
        call(request=msgspec.structs.replace(REQUEST, prompt="p\x00" * 5000), result=long),
        worker_id="w1",
        attempt=1,
        at=T0,
    )
    assert len(event.prompt) == TEXT_CHARS and len(event.answer) == TEXT_CHARS
    assert "characters cut" in event.prompt and "characters cut" in event.answer
    assert "\x00" not in event.prompt  # storable
    assert (event.input_tokens, event.output_tokens) == (None, None)  # none reported


def test_a_call_that_failed_before_routing_keeps_the_callers_prompt() -> None:
    event = called_event(
        call(request=None, error=ConnectionError(), prompt="asked"),
        worker_id="w1",
        attempt=1,
        at=T0,
    )
    assert (event.prompt, event.answer, event.input_tokens) == ("asked", "", None)


def line(version: int, tokens: tuple[int | None, int | None]) -> ModelCallLine:
    return ModelCallLine(
        version=version,
        started_at=T0,
        recorded_at=T0,
        attempt=1,
        worker_id="w1",
        contract_family="policy_routing",
        contract_id="default",
        model="m",
        revision_id=None,
        body_hash=None,
        duration_ms=1.0,
        outcome="ok",
        reason="",
        trace_id=None,
        input_tokens=tokens[0],
        output_tokens=tokens[1],
    )


def test_token_totals_sum_the_calls_that_reported_counts() -> None:
    totals = token_totals([line(3, (10, 4)), line(5, (None, None)), line(7, (2, 1))])
    assert (totals.input_tokens, totals.output_tokens) == (12, 5)
    assert (totals.counted, totals.calls) == (2, 3)
    assert token_totals([]) == TokenTotals(input_tokens=0, output_tokens=0, counted=0, calls=0)


def test_the_local_model_counts_words_deterministically() -> None:
    assert local_tokens("You are terse.", "Summarise  the\nalert") == 6
    assert local_tokens(None, "") == 0
