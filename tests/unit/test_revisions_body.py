"""Canonical body hashing, names and per-family body validation (pure)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from awooop.core.errors import InvalidContractBodyError, InvalidInputError
from awooop.revisions.body import body_hash, canonical_json, check_names, validate_body

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(
        st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=20
    ),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.text(
                st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=8
            ),
            children,
            max_size=4,
        )
    ),
    max_leaves=20,
)


def test_the_hash_ignores_key_order_and_spacing() -> None:
    a = msgspec.json.decode(b'{"model": "m", "options": {"b": 1, "a": [1, 2.5]}}')
    b = msgspec.json.decode(b'{"options":{"a":[1,2.5],"b":1},"model":"m"}')
    assert body_hash(a) == body_hash(b)
    assert canonical_json(a) == b'{"model":"m","options":{"a":[1,2.5],"b":1}}'


def test_integral_numbers_hash_the_same_however_spelled() -> None:
    assert body_hash({"n": 1.0}) == body_hash({"n": 1})
    assert body_hash({"n": 1e16}) == body_hash({"n": 10**16})
    assert body_hash({"n": 1e300}) == body_hash({"n": 10**300})
    assert body_hash({"n": -0.0}) == body_hash({"n": 0})
    assert body_hash({"n": 1.5}) != body_hash({"n": 1})
    with pytest.raises(InvalidContractBodyError):
        canonical_json({"n": float("nan")})


@pytest.mark.parametrize("body", [{"a\x00": 1}, {"a": ["x\x00y"]}])
def test_nul_characters_are_refused(body: Any) -> None:
    with pytest.raises(InvalidContractBodyError):
        validate_body("p", "channel_event", "c", body)


def test_the_hash_changes_with_any_value() -> None:
    assert body_hash({"model": "m1"}) != body_hash({"model": "m2"})
    assert body_hash({"n": 1}) != body_hash({"n": "1"})
    assert body_hash({"n": [1, 2]}) != body_hash({"n": [2, 1]})


def test_the_hash_has_a_stable_known_value() -> None:
    # Stored once: if this changes, every stored body_hash changes meaning.
    assert body_hash({"b": 1, "a": "x"}) == (
        "sha256:cdab067e9f3beb32d1252cfd63e492592fecbf591b0d08cadb24bb17f3864246"
    )


@given(json_values)
def test_canonical_encoding_round_trips_to_the_same_hash(value: Any) -> None:
    again = msgspec.json.decode(canonical_json(value))
    assert body_hash(again) == body_hash(value)


@pytest.mark.parametrize(
    ("project", "family", "contract"),
    [
        ("", "policy_routing", "default"),
        ("p 1", "policy_routing", "default"),
        ("p", "Policy", "default"),
        ("p", "policy_routing", ""),
        ("p", "policy_routing", "a/b"),
        ("p" * 65, "policy_routing", "default"),
    ],
)
def test_malformed_names_are_refused(project: str, family: str, contract: str) -> None:
    with pytest.raises(InvalidInputError):
        check_names(project, family, contract)


def test_good_names_pass() -> None:
    check_names("__platform__", "platform_resource", "ollama_topology")
    check_names("awoooi", "policy_routing", "awoooi-sre.v2")


@pytest.mark.parametrize(
    ("family", "contract", "body"),
    [
        ("policy_routing", "default", []),
        ("policy_routing", "default", "text"),
        ("policy_routing", "default", {"model": 3}),
        ("policy_routing", "default", {"model": ""}),
        ("policy_routing", "default", {"api": "stream"}),
        ("policy_routing", "default", {"system": ["x"]}),
        ("policy_routing", "default", {"options": []}),
        ("policy_routing", "default", {"routes": {"fast": 1}}),
        ("policy_routing", "default", {"retry": 3}),
        ("policy_routing", "default", {"retry": {"tries": 3}}),
        ("policy_routing", "default", {"retry": {"max_attempts": 0}}),
        ("policy_routing", "default", {"retry": {"max_attempts": 2.5}}),
        ("policy_routing", "default", {"retry": {"max_attempts": None}}),
        ("policy_routing", "default", {"retry": {"initial_s": "1"}}),
        ("policy_routing", "default", {"retry": {"jitter": True}}),
        ("policy_routing", "default", {"retry": {"multiplier": 0.5}}),
        ("policy_routing", "default", {"retry": {"on": ["ValueError"]}}),
        ("policy_routing", "default", {"retry": {"on": "E-LLM-002"}}),
        ("channel_event", "telegram", None),
    ],
)
def test_bodies_a_family_cannot_use_are_refused(family: str, contract: str, body: Any) -> None:
    with pytest.raises(InvalidContractBodyError):
        validate_body("p", family, contract, body)


def test_a_policy_may_carry_a_retry_section() -> None:
    retry = {"max_attempts": 5, "initial_s": 0.2, "max_s": 4, "on": ["retryable", "E-LLM-002"]}
    validate_body("p", "policy_routing", "default", {"model": "m", "retry": retry})


def test_topology_bodies_are_checked_and_belong_to_the_platform() -> None:
    validate_body("__platform__", "platform_resource", "ollama_topology", {"url": "local:"})
    validate_body(
        "__platform__", "platform_resource", "ollama_topology", {"url": "http://gpu-1:11434"}
    )
    with pytest.raises(InvalidContractBodyError):
        validate_body("__platform__", "platform_resource", "ollama_topology", {"url": "ftp://x"})
    with pytest.raises(InvalidContractBodyError):
        validate_body("tenant", "platform_resource", "ollama_topology", {"url": "local:"})


def test_a_valid_policy_passes() -> None:
    validate_body(
        "p",
        "policy_routing",
        "default",
        {
            "model": "qwen2.5:7b",
            "api": "chat",
            "system": "be brief",
            "options": {"temperature": 0.1},
            "routes": {"summarize": "llama3.2:1b"},
        },
    )
