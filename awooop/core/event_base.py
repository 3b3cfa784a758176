"""The base of every domain event (:mod:`awooop.core.events`): a msgspec Struct tagged by its
class name in the field ``type``, with the time it happened."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

JSON = Any


class EventBase(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    at: datetime
