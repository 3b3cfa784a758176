"""Every background loop of the system, gathered from one module per concern.

Each module in LOOP_MODULES defines ``loops(services) -> list[LoopSpec]``. ``awooop loops list``
and ``awooop loops run`` (and ``awooop up``) take their loops from here, so a loop added to a
module is listed, run and monitored everywhere at once.
"""

from __future__ import annotations

import importlib

from awooop.core.loops import LoopSpec
from awooop.services import Services

LOOP_MODULES: tuple[str, ...] = (
    "awooop.loops.stats",
    "awooop.loops.relay",
    "awooop.loops.dedupe_expiry",
    "awooop.loops.log_partitions",
    "awooop.loops.runs",
    "awooop.loops.timers",
    "awooop.loops.bulk_operations",
    "awooop.loops.schedules",
    "awooop.loops.projector",
)


def all_loops(services: Services) -> list[LoopSpec]:
    specs: list[LoopSpec] = []
    for name in LOOP_MODULES:
        specs.extend(importlib.import_module(name).loops(services))
    names = [s.name + "/" + (s.project_id or "") for s in specs]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise ValueError(f"loop names must be unique: {sorted(duplicates)}")
    return specs
