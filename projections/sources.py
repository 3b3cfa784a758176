"""Where a service's projections come from, and the checks a registration must pass before
anything runs (E-PROJECTION-003).

A source is ``module:object``: the object is a :class:`awooop.projections.custom.Projection`
subclass or instance, or a list or tuple of them. Sources are read from

- the entry point group ``awooop.projections`` of every installed distribution (a service's
  ``[project.entry-points."awooop.projections"]``: ``orders = "shop.read_models:OrderTotals"``);
- ``AWOOOP_PROJECTIONS`` (comma-separated sources);
- ``--projection module:object`` options of ``awooop projector`` and ``awooop replay``.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from awooop.core.errors import ProjectionRegistrationError
from awooop.core.events import DOMAIN_PREFIX, REVISION_PREFIX, RUN_STREAM_PREFIX
from awooop.projections.custom import Projection

ENTRY_POINT_GROUP = "awooop.projections"
NAME = re.compile(r"[a-z][a-z0-9_]{0,47}")
TABLE = re.compile(r"[a-z_][a-z0-9_]{0,54}")  # room for the replay's "__shadow" suffix
COLUMN = re.compile(r"[a-z_][a-z0-9_]{0,62}")
EVENT_TYPE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,99}")
STREAM_PREFIXES = (DOMAIN_PREFIX, RUN_STREAM_PREFIX, REVISION_PREFIX)


@dataclass(frozen=True)
class Loaded:
    """A service's projection and where it was registered (for messages)."""

    projection: Projection
    source: str


def parse_sources(text: str) -> list[str]:
    """``AWOOOP_PROJECTIONS``: comma-separated ``module:object`` sources."""
    return [part.strip() for part in text.split(",") if part.strip()]


def load_source(source: str) -> list[Loaded]:
    """Import ``module:object`` and check every projection it names."""
    module_name, sep, attribute = source.partition(":")
    if not sep or not module_name or not attribute:
        raise ProjectionRegistrationError(
            f"projection source {source!r}: expected module:object (e.g. shop.views:OrderTotals)"
        )
    try:
        target: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise ProjectionRegistrationError(f"projection source {source!r}: {exc}") from exc
    return [Loaded(check(item, source), source) for item in _items(target, source)]


def entry_point_sources() -> list[str]:
    """The ``module:object`` of every entry point in the group ``awooop.projections``."""
    return [ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)]


def load_all(sources: Iterable[str], reserved: Iterable[str]) -> dict[str, Loaded]:
    """Every projection of ``sources`` by name; a name used twice, or one of ``reserved``
    (the built-in projections), is refused."""
    taken = set(reserved)
    loaded: dict[str, Loaded] = {}
    for source in dict.fromkeys(sources):  # one source named twice registers once
        for item in load_source(source):
            name = item.projection.name
            if name in taken:
                raise ProjectionRegistrationError(
                    f"projection {name!r} of {source} is a built-in projection's name"
                )
            if name in loaded:
                raise ProjectionRegistrationError(
                    f"projection {name!r} is registered twice ({loaded[name].source}, {source})"
                )
            loaded[name] = item
    return loaded


def _items(target: Any, source: str) -> list[Projection]:
    if isinstance(target, list | tuple):
        items = [_instance(t, source) for t in target]
        if not items:
            raise ProjectionRegistrationError(f"projection source {source!r} names no projection")
        return items
    return [_instance(target, source)]


def _instance(target: Any, source: str) -> Projection:
    if isinstance(target, type) and issubclass(target, Projection):
        try:
            return target()
        except TypeError as exc:
            raise ProjectionRegistrationError(
                f"projection source {source!r}: {target.__name__}() takes no arguments: {exc}"
            ) from exc
    if isinstance(target, Projection):
        return target
    raise ProjectionRegistrationError(
        f"projection source {source!r} is not an awooop.consumer.Projection (subclass or "
        f"instance), nor a list of them: {target!r}"
    )


def check(projection: Projection, source: str) -> Projection:
    """The static checks of a projection's declaration (pure, E-PROJECTION-003)."""
    kind = type(projection).__name__

    def refuse(problem: str) -> ProjectionRegistrationError:
        return ProjectionRegistrationError(f"projection {kind} ({source}): {problem}")

    name = getattr(projection, "name", None)
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise refuse("name must be 1-48 lower-case letters, digits and _, starting with a letter")
    types = getattr(projection, "event_types", None)
    if (
        isinstance(types, str)
        or not isinstance(types, Iterable)
        or not types
        or not all(isinstance(t, str) and EVENT_TYPE.fullmatch(t) for t in types)
    ):
        raise refuse("event_types must be a non-empty set of event type names")
    if not isinstance(projection.streams, str) or not projection.streams.startswith(
        STREAM_PREFIXES
    ):
        raise refuse(f"streams must start with one of {', '.join(STREAM_PREFIXES)}")
    if projection.table is not None:
        if not isinstance(projection.table, str) or not TABLE.fullmatch(projection.table):
            raise refuse("table must be a lower-case table name (up to 55 characters)")
        key = projection.key
        if (
            not isinstance(key, tuple)
            or not key
            or not all(isinstance(c, str) and COLUMN.fullmatch(c) for c in key)
        ):
            raise refuse("key must be a tuple of the table's primary key columns")
    if type(projection).apply is Projection.apply:
        raise refuse("apply() is not defined")
    return projection
