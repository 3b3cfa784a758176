"""The record of a model call (awooop.llm.calls) and its display (projections.model_calls):
pure functions."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime
from typing import Any

from awooop.core.errors import ModelResponseError
from awooop.llm.calls import called_event, outcome_of
from awooop.llm.client import ModelRequest
from awooop.llm.gateway import LLMResult, ModelCall
from projections.model_calls import short_hash

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
