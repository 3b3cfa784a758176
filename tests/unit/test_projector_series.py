"""A projector's counters exist at 0 from its start, so the lag dashboard's panels and any rule
over them read 0 on a healthy system instead of "No data"."""

from __future__ import annotations

from typing import Any

from prometheus_client import REGISTRY

from awooop.projections import registry
from awooop.projections.runner import Projector


def test_a_projector_creates_its_series_at_start() -> None:
    name = registry.projector_names()[0]
    db: Any = None  # the constructor only keeps it
    Projector(db, registry.get(name))
    for metric, labels in (
        ("awooop_projector_events_total", {"projection": name, "outcome": "filled"}),
        ("awooop_projector_reconciled_events_total", {"projection": name}),
        ("awooop_projector_batch_failures_total", {"projection": name}),
    ):
        assert REGISTRY.get_sample_value(metric, labels) is not None, metric
