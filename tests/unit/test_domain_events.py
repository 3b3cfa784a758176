"""Pure checks of the producer's domain events (R-06): what the log stores, what is refused."""

from __future__ import annotations

import pytest

from awooop.core.errors import InvalidInputError
from awooop.core.events import EVENT_TYPES
from awooop.eventlog.eventlog import RawEvent
from awooop.producer import DomainEvent, check_domain_event, domain_stream_id


def test_a_good_event_is_stored_as_compact_json() -> None:
    event = DomainEvent("order-1", "OrderPaid", {"order": 1, "amount": "9.90"})
    assert check_domain_event(event, 1024) == RawEvent("OrderPaid", '{"order":1,"amount":"9.90"}')


def test_stream_ids_cannot_collide_across_projects() -> None:
    # project ids and stream names may both hold ":", neither holds "/"
    assert domain_stream_id("a", "b:c") != domain_stream_id("a:b", "c")
    assert domain_stream_id("shop", "order-1") == "domain/shop/order-1"


@pytest.mark.parametrize("runtime_type", [t.__name__ for t in EVENT_TYPES])
def test_no_runtime_event_type_can_be_emitted(runtime_type: str) -> None:
    with pytest.raises(InvalidInputError):
        check_domain_event(DomainEvent("order-1", runtime_type, {}), 1024)
