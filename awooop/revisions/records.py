"""What the revision store returns: revisions, contract summaries, activations."""

from __future__ import annotations

import enum
import uuid
from datetime import datetime
from typing import Any, Final

import msgspec


class Revision(msgspec.Struct, frozen=True, kw_only=True):
    revision_id: uuid.UUID
    project_id: str
    contract_family: str
    contract_id: str
    body_hash: str
    created_at: datetime
    active: bool = False
    body: Any = None  # filled by show/get, not by list


class ContractSummary(msgspec.Struct, frozen=True, kw_only=True):
    contract_family: str
    contract_id: str
    revisions: int
    last_created_at: datetime
    active_revision_id: uuid.UUID | None
    activated_at: datetime | None


class Activation(msgspec.Struct, frozen=True, kw_only=True):
    project_id: str
    contract_family: str
    contract_id: str
    old_revision_id: uuid.UUID | None
    new_revision_id: uuid.UUID
    changed: bool  # False: the revision was already active; nothing was written
    event_id: uuid.UUID | None = None  # the outbox row
    at: datetime | None = None


class _Any(enum.Enum):
    ANY = "any"


ANY: Final = _Any.ANY
"""``expected`` value meaning "no optimistic check" (the pointer row lock still serialises)."""

Expected = uuid.UUID | None | _Any
