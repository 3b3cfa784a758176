"""Every projection by name: what ``awooop replay`` rebuilds and ``awooop projector`` runs.

The built-in projections, and the projections services register (:mod:`awooop.projections.sources`:
the ``awooop.projections`` entry points, ``AWOOOP_PROJECTIONS``, ``--projection``), each of the
latter through its adapter (:mod:`awooop.projections.registered`), so that both kinds go
through the same runner, loops and replay.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from awooop.core.db import Connection, Database
from awooop.core.errors import UnknownProjectionError
from awooop.projections import sources
from awooop.projections.base import Projection
from awooop.projections.registered import Registered, registered
from awooop.projections.revisions import RevisionHistoryProjection
from awooop.projections.run_state import RunStateProjection, RunStateViewProjection
from awooop.projections.timeline import TimelineProjection

BUILT_IN = ("run_state", "run_state_view", "run_timeline", "revision_history")

# Sources named by this process's settings and command line (entry points are always read).
_sources: list[str] = []
_loaded: dict[tuple[str, ...], dict[str, sources.Loaded]] = {}


def use_sources(names: Iterable[str]) -> None:
    """Register ``module:object`` sources for this process (``AWOOOP_PROJECTIONS``,
    ``--projection``), after loading them (E-PROJECTION-003 for a bad one)."""
    for name in names:
        if name not in _sources:
            _sources.append(name)
    service_projections()


def built_in() -> dict[str, Projection]:
    """Fresh instances (the bulk fold of some keeps per-run aggregates)."""
    projections: list[Projection] = [
        RunStateProjection(),
        RunStateViewProjection(),
        TimelineProjection(),
        RevisionHistoryProjection(),
    ]
    return {p.name: p for p in projections}


def service_projections() -> dict[str, Registered]:
    """Fresh adapters of the services' registered projections."""
    key = (*sources.entry_point_sources(), *_sources)
    loaded = _loaded.get(key)
    if loaded is None:
        loaded = _loaded[key] = sources.load_all(key, BUILT_IN)
    return {name: registered(item.projection, item.source) for name, item in loaded.items()}


def all_projections() -> dict[str, Projection]:
    return {**built_in(), **service_projections()}


def find(name: str) -> Projection | None:
    """The projection ``name``: a built-in one without loading the services' registrations
    (a broken one stops only what asks for it), else a service's; None when unknown."""
    projection = built_in().get(name)
    if projection is None:
        projection = service_projections().get(name)
    return projection


def get(name: str) -> Projection:
    projection = find(name)
    if projection is None:
        known = ", ".join(sorted(all_projections()))
        raise UnknownProjectionError(f"unknown projection {name!r}; known: {known}")
    return projection


def projector_names() -> list[str]:
    """Projections maintained by projector processes (inline ones are kept by the write path)."""
    return [name for name, p in all_projections().items() if not p.inline]


async def check_tables(db: Database, projections: Sequence[Projection]) -> None:
    """The start-time checks of the services' projections among ``projections`` (their tables
    exist and are isolated per tenant: E-PROJECTION-003, E-PROJECTION-004)."""
    services = [p for p in projections if isinstance(p, Registered)]
    for projection in services:

        async def check(conn: Connection, projection: Registered = projection) -> None:
            await projection.check_tables(conn)

        await db.in_platform(check)
