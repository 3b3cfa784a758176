"""The per-project share of concurrent management and console requests, and which requests
RequestBounds leaves alone (pure parts of awooop.http.capacity)."""

from __future__ import annotations

import pytest

from awooop.core.errors import TenantShareExceededError
from awooop.http.capacity import INGEST_PATH, Held, TenantShare, has_body


def test_a_project_has_at_most_its_share_and_others_are_not_affected() -> None:
    share = TenantShare(2)
    share.take("a")
    share.take("a")
    with pytest.raises(TenantShareExceededError) as refused:
        share.take("a")
    assert refused.value.code == "E-HTTP-429" and refused.value.http_status == 429
    assert refused.value.retry_after_s is not None and refused.value.retry_after_s >= 1
    share.take("b")  # another project's share is its own
    share.give_back("a")
    share.take("a")  # a request that ended makes room
    assert share.in_progress == {"a": 2, "b": 1}


def test_a_request_counts_once_per_project_and_gives_everything_back() -> None:
    share = TenantShare(1)
    held = Held(share)
    held.take("a")
    held.take("a")  # the route and the console both asking: still one request
    with pytest.raises(TenantShareExceededError):
        Held(share).take("a")
    held.give_back()
    assert share.in_progress == {}
    Held(share).take("a")


def test_a_refused_request_holds_nothing() -> None:
    share = TenantShare(1)
    Held(share).take("a")
    refused = Held(share)
    with pytest.raises(TenantShareExceededError):
        refused.take("a")
    refused.give_back()
    assert share.in_progress == {"a": 1}


def test_ingest_paths_and_bodies() -> None:
    assert INGEST_PATH.match("/v1/projects/shop/channels/api")
    assert not INGEST_PATH.match("/v1/projects/shop/runs/1")
    assert not INGEST_PATH.match("/ui/runs")
    assert has_body({"headers": [(b"content-length", b"12")]})
    assert has_body({"headers": [(b"transfer-encoding", b"chunked")]})
    assert not has_body({"headers": [(b"content-length", b"0")]})
    assert not has_body({"headers": []})
