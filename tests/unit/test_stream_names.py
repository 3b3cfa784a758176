"""The stream-name rule (migrations/0115_stream_names.sql) in Python: a name says whose stream
it is, and the event log's functions refuse another project's name before they write."""

from __future__ import annotations

import uuid

import pytest

from awooop.core.errors import StreamNotOfProjectError
from awooop.core.events import (
    revision_stream_id,
    run_id_of_stream,
    run_stream_id,
    stream_of_project,
)
from awooop.eventlog.eventlog import check_stream
from awooop.producer import domain_stream_id

RUN = run_stream_id(uuid.UUID("0190f0e2-7b1a-7c3d-8e4f-5a6b7c8d9e0f"))

# (stream_id, project_id, whether the name may be the project's)
CASES = [
    (RUN, "alpha", True),  # a run's project is its run row's: the database asks it
    (RUN, "beta", True),
    ("run-42", "alpha", False),  # the shape of a uuid
    (RUN + "x", "alpha", False),
    ("run-" + RUN[4:].replace("-", "x", 1)[:-1] + "-", "alpha", False),  # a dash out of place
    (domain_stream_id("alpha", "order-42"), "alpha", True),
    (domain_stream_id("beta", "order-42"), "alpha", False),
    ("domain/alpha/", "alpha", False),  # a domain stream has a name
    ("domain/alpha", "alpha", False),
    ("domain/alphabet/x", "alpha", False),  # the project is the text up to the next '/'
    ("domain/alpha/x", "alphabet", False),
    ("domain/a_b/x", "a%b", False),  # no pattern matching in project ids
    (revision_stream_id("alpha", "policy_routing", "default"), "alpha", True),
    (revision_stream_id("beta", "policy_routing", "default"), "alpha", False),
    ("revision-alpha/", "alpha", False),
    ("revision-alphabet/agent/c", "alpha", False),
    ("s-1", "alpha", False),  # a name of no known form is nobody's
    ("", "alpha", False),
    ("alpha/domain/x", "alpha", False),
]


@pytest.mark.parametrize(("stream_id", "project_id", "allowed"), CASES)
def test_a_stream_name_says_whose_stream_it_is(
    stream_id: str, project_id: str, allowed: bool
) -> None:
    assert stream_of_project(stream_id, project_id) is allowed
    if allowed:
        check_stream(stream_id, project_id)
    else:
        with pytest.raises(StreamNotOfProjectError) as refusal:
            check_stream(stream_id, project_id)
        assert refusal.value.code == "E-EVENT-004"
        assert refusal.value.http_status == 403


def test_a_run_streams_id_reads_back_as_its_run_and_no_other_stream_does() -> None:
    run_id = uuid.uuid4()
    assert run_id_of_stream(run_stream_id(run_id)) == run_id
    for other in (domain_stream_id("alpha", "order-42"), revision_stream_id("a", "b", "c"), "s-1"):
        assert run_id_of_stream(other) is None
