"""Contract bodies: canonical JSON, ``body_hash``, names and per-family validation (all pure).

``body_hash`` is ``sha256:`` + the hex SHA-256 of the canonical encoding: UTF-8 JSON with
object keys sorted, no insignificant whitespace, integral numbers written as integers (``1.0``
is ``1``, ``1e16`` is ``10000000000000000``, as in RFC 8785 and as JSONB stores them) and other
floats in their shortest round-trip form. It depends on the body's value only, so the same
body gives the same hash whichever client sent it and whatever key order, spacing or number
spelling it used, and the body read back from JSONB hashes to the stored value (a property
test holds us to that).
"""

from __future__ import annotations

import hashlib
import math
import re
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

import msgspec

from awooop.core.context import PLATFORM_PROJECT
from awooop.core.errors import InvalidContractBodyError, InvalidInputError
from awooop.revisions.retry_section import check_agent_retry, check_policy_retry

POLICY_FAMILY = "policy_routing"
AGENT_FAMILY = "agent"  # a run's contract (its contract_id): max_attempts, retry
CHANNEL_EVENT_FAMILY = "channel_event"
TOPOLOGY_FAMILY = "platform_resource"
TOPOLOGY_CONTRACT = "ollama_topology"
TOPOLOGY_KEY = (PLATFORM_PROJECT, TOPOLOGY_FAMILY, TOPOLOGY_CONTRACT)

PROJECT_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,63}$")
FAMILY_RE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
CONTRACT_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}$")
MODEL_APIS = ("generate", "chat")

_canonical = msgspec.json.Encoder(order="sorted")


def canonical_json(body: Any) -> bytes:
    """The canonical encoding of a JSON value (sorted keys, compact, integral numbers as
    integers, other floats shortest)."""
    try:
        return _canonical.encode(_normalise(body))
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise InvalidContractBodyError(f"the body is not plain JSON: {exc}") from exc


def _normalise(value: Any) -> Any:
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("NaN and infinity are not JSON")
        if value.is_integer():
            # The decimal the float's shortest repr names (1e300 -> 10**300, which is what
            # JSONB keeps), not the float's binary expansion.
            return int(Decimal(repr(value)))
        return value
    if isinstance(value, str):
        if "\x00" in value:
            raise ValueError("strings must not contain NUL (PostgreSQL JSONB cannot store it)")
        return value
    if isinstance(value, dict):
        return {_normalise(k): _normalise(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    return value


def body_hash(body: Any) -> str:
    return "sha256:" + hashlib.sha256(canonical_json(body)).hexdigest()


def check_names(project_id: str, family: str, contract_id: str) -> None:
    """Refuse malformed identifiers with E-INPUT-001 before anything is written."""
    if not PROJECT_RE.match(project_id):
        raise InvalidInputError(
            "project_id must be 1-64 characters of letters, digits and _ . : -",
            project_id=project_id,
        )
    if not FAMILY_RE.match(family):
        raise InvalidInputError(
            "contract family must be 1-32 characters of lowercase letters, digits and _",
            family=family,
        )
    if not CONTRACT_RE.match(contract_id):
        raise InvalidInputError(
            "contract_id must be 1-128 characters of letters, digits and _ . : -",
            contract_id=contract_id,
        )


def validate_body(project_id: str, family: str, contract_id: str, body: Any) -> None:
    """Refuse a body its family cannot use (E-REVISION-006): when a revision is created, and
    again when one is activated (a revision stored before a rule existed), so that no such
    body is ever active."""
    if not isinstance(body, dict):
        raise InvalidContractBodyError("a contract body must be a JSON object")
    canonical_json(body)  # every value must be plain JSON
    if family == POLICY_FAMILY:
        _validate_policy(body)
    elif family == AGENT_FAMILY:
        if body.get("retry") is not None:
            check_agent_retry(AGENT_FAMILY, body["retry"])
    elif (family, contract_id) == (TOPOLOGY_FAMILY, TOPOLOGY_CONTRACT):
        if project_id != PLATFORM_PROJECT:
            raise InvalidContractBodyError(
                f"{TOPOLOGY_FAMILY}/{TOPOLOGY_CONTRACT} belongs to project {PLATFORM_PROJECT}"
            )
        _validate_topology(body)


def _validate_policy(body: dict[str, Any]) -> None:
    model = body.get("model")
    if model is not None and (not isinstance(model, str) or not model):
        raise InvalidContractBodyError("policy_routing: model must be a non-empty string")
    if body.get("api", "generate") not in MODEL_APIS:
        raise InvalidContractBodyError("policy_routing: api must be 'generate' or 'chat'")
    system = body.get("system")
    if system is not None and not isinstance(system, str):
        raise InvalidContractBodyError("policy_routing: system must be a string")
    if not isinstance(body.get("options", {}), dict):
        raise InvalidContractBodyError("policy_routing: options must be an object")
    routes = body.get("routes", {})
    if not isinstance(routes, dict) or not all(isinstance(m, str) and m for m in routes.values()):
        raise InvalidContractBodyError("policy_routing: routes must map route names to model names")
    if body.get("retry") is not None:
        check_policy_retry(POLICY_FAMILY, body["retry"])


def _validate_topology(body: dict[str, Any]) -> None:
    url = body.get("url")
    if url is not None and not (isinstance(url, str) and model_url_ok(url)):
        raise InvalidContractBodyError(
            "ollama_topology: url must be 'local:...' or an http(s)://host:port URL"
        )
    default_model = body.get("default_model")
    if default_model is not None and (not isinstance(default_model, str) or not default_model):
        raise InvalidContractBodyError("ollama_topology: default_model must be a string")


def model_url_ok(url: str) -> bool:
    if url.startswith("local:"):
        return True
    parts = urlsplit(url)
    try:
        _ = parts.port
    except ValueError:
        return False
    return parts.scheme in {"http", "https"} and bool(parts.hostname)
