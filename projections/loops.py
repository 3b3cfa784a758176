"""Projector loops: for each projector projection, a consumer loop and a reconcile loop.

Both are platform loops (R-40): a projector works across projects with the platform role.
The consumer loop drains the shard events streams through the group ``projector:<name>``;
the reconcile loop heals from Postgres what the streams lost (also run once at start).
"""

from __future__ import annotations

from awooop.loops import LoopCategory, LoopContext, LoopSpec
from awooop.services import Services
from projections import registry
from projections.runner import Projector


def projector_loops(services: Services, names: list[str]) -> list[LoopSpec]:
    specs: list[LoopSpec] = []
    for name in names:
        projector = Projector(services.db, registry.get(name))
        specs.append(reconcile_loop(services, projector))
    return specs


def reconcile_loop(services: Services, projector: Projector) -> LoopSpec:
    async def body(ctx: LoopContext) -> None:
        await projector.reconcile()

    return LoopSpec(
        name=f"projector-reconcile:{projector.name}",
        category=LoopCategory.PLATFORM,
        interval_s=services.settings.projector_reconcile_interval_s,
        body=body,
        description=f"apply from Postgres what the {projector.name} view missed on the streams",
    )


def loops(services: Services) -> list[LoopSpec]:
    """Every projector loop (listed in awooop.loop_registry.LOOP_MODULES)."""
    return projector_loops(services, registry.projector_names())
