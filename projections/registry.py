"""Every projection by name: what ``awooop replay`` rebuilds and ``awooop projector`` runs."""

from __future__ import annotations

from awooop.core.errors import UnknownProjectionError
from awooop.projections.base import Projection
from awooop.projections.revisions import RevisionHistoryProjection
from awooop.projections.run_state import RunStateProjection, RunStateViewProjection
from awooop.projections.timeline import TimelineProjection


def all_projections() -> dict[str, Projection]:
    """Fresh instances (the bulk fold of some keeps per-run aggregates)."""
    projections: list[Projection] = [
        RunStateProjection(),
        RunStateViewProjection(),
        TimelineProjection(),
        RevisionHistoryProjection(),
    ]
    return {p.name: p for p in projections}


def get(name: str) -> Projection:
    projections = all_projections()
    if name not in projections:
        raise UnknownProjectionError(
            f"unknown projection {name!r}; known: {', '.join(sorted(projections))}"
        )
    return projections[name]


def projector_names() -> list[str]:
    """Projections maintained by projector processes (inline ones are kept by the write path)."""
    return [name for name, p in all_projections().items() if not p.inline]
