"""Registering a service's projection (docs/consumers.md): where sources come from, and the
typed refusals of a bad registration (E-PROJECTION-003), before anything runs."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from awooop.consumer import Projection, Record
from awooop.core.db import Connection
from awooop.core.errors import ProjectionRegistrationError
from awooop.examples.orders import OrderTotals
from awooop.projections import registry, sources
from awooop.projections.registered import Registered, registered
from awooop.projections.replay import replay

SOURCE = "awooop.examples.orders:OrderTotals"


class NoApply(Projection):
    name = "no_apply"
    event_types = frozenset({"OrderPlaced"})


class BadName(OrderTotals):
    name = "Order-Totals"


class NoTypes(OrderTotals):
    name = "no_types"
    event_types = frozenset()


class NoKey(OrderTotals):
    name = "no_key"
    key = ()


class BadStreams(OrderTotals):
    name = "bad_streams"
    streams = "orders/"


class BuiltInName(OrderTotals):
    name = "run_timeline"


class NotAProjection:
    name = "stranger"

    async def apply(self, conn: Connection, table: str, records: Sequence[Record]) -> None:
        return None


TWICE = [OrderTotals, OrderTotals()]


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ("awooop.examples.orders", "expected module:object"),
        ("tests.support.no_such_module:OrderTotals", "No module named"),
        ("awooop.examples.orders:NoSuchThing", "NoSuchThing"),
        (f"{__name__}:NoApply", "apply() is not defined"),
        (f"{__name__}:BadName", "name must be"),
        (f"{__name__}:NoTypes", "event_types must be"),
        (f"{__name__}:NoKey", "key must be"),
        (f"{__name__}:BadStreams", "streams must start with"),
        (f"{__name__}:BuiltInName", "a built-in projection's name"),
        (f"{__name__}:NotAProjection", "is not an awooop.consumer.Projection"),
        (f"{__name__}:TWICE", "registered twice"),
    ],
)
def test_a_bad_registration_is_refused_with_its_code(source: str, says: str) -> None:
    with pytest.raises(ProjectionRegistrationError) as raised:
        sources.load_all([source], registry.BUILT_IN)
    assert raised.value.code == "E-PROJECTION-003"
    assert says in str(raised.value)


def test_awooop_projections_lists_sources_separated_by_commas() -> None:
    assert sources.parse_sources(" a.b:C, d:E ,,") == ["a.b:C", "d:E"]
    loaded = sources.load_all(sources.parse_sources(f"{SOURCE}, {SOURCE}"), registry.BUILT_IN)
    assert list(loaded) == ["order_totals"]


@pytest.fixture
def installed_service(tmp_path: Path) -> Iterator[None]:
    """A distribution on sys.path whose metadata declares an ``awooop.projections`` entry
    point, as ``pip install`` of a service with one in its pyproject.toml leaves it."""
    info = tmp_path / "shop_service-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: shop-service\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[awooop.projections]\norder_totals = {SOURCE}\n")
    sys.path.insert(0, str(tmp_path))
    try:
        yield
    finally:
        sys.path.remove(str(tmp_path))


@pytest.mark.usefixtures("installed_service")
def test_an_installed_services_entry_point_registers_its_projection() -> None:
    assert SOURCE in sources.entry_point_sources()
    projection = registry.get("order_totals")
    assert isinstance(projection, Registered)
    assert projection.event_types == {"OrderPlaced", "OrderCancelled"}
    assert projection.stream_prefix == "domain/"
    assert "order_totals" in registry.projector_names()
    assert set(registry.BUILT_IN) <= set(registry.all_projections())


class Audit(Projection):
    name = "audit"
    event_types = frozenset({"OrderPlaced"})

    async def apply(self, conn: Connection, table: str, records: Sequence[Record]) -> None:
        return None


async def test_a_projection_without_a_table_runs_but_cannot_be_replayed() -> None:
    projection = registered(Audit(), "tests")
    assert projection.tables == ()
    with pytest.raises(ProjectionRegistrationError) as raised:
        await replay("postgresql://nowhere.invalid/none", projection)
    assert raised.value.code == "E-PROJECTION-003"
    assert "keeps no table" in str(raised.value)
