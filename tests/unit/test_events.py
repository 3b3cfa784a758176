"""Stored events of every type still decode (the schema-evolution rules in awooop.core.events)."""

from __future__ import annotations

import pytest

from awooop.core import events as ev

# Written once as they were stored; never edit these strings, add new ones.
STORED = {
    "RunCreated": '{"type":"RunCreated","at":"2026-01-01T00:00:00Z","run_id":'
    '"7d9f1c3e-0c59-4a8e-9d6e-2f4c8f0e9b11","project_id":"p1","channel_type":"telegram",'
    '"provider_event_id":"42","input":{"text":"hi"},"max_attempts":3}',
    "RunClaimed": '{"type":"RunClaimed","at":"2026-01-01T00:00:00Z","worker_id":"w1",'
    '"attempt":1,"lease_until":"2026-01-01T00:00:30Z"}',
    "StepCompleted": '{"type":"StepCompleted","at":"2026-01-01T00:00:01Z","worker_id":"w1",'
    '"attempt":1,"step":"fetch","result":[1,2]}',
    "ToolWaitStarted": '{"type":"ToolWaitStarted","at":"2026-01-01T00:00:01Z",'
    '"worker_id":"w1","attempt":1,"tool":"search"}',
    "ToolResultReceived": '{"type":"ToolResultReceived","at":"2026-01-01T00:00:01Z",'
    '"worker_id":"w1","attempt":1,"tool":"search","result":null}',
    "ModelCalled": '{"type":"ModelCalled","at":"2026-01-01T00:00:02Z","worker_id":"w1",'
    '"attempt":1,"contract_family":"policy_routing","contract_id":"default","model":"qwen",'
    '"revision_id":"0b8a2c8e-51a4-4c52-9a63-0d3f0bb1f2aa","body_hash":"abc",'
    '"started_at":"2026-01-01T00:00:01.5Z","duration_ms":480.25,"outcome":"ok"}',
    "ApprovalRequested": '{"type":"ApprovalRequested","at":"2026-01-01T00:00:02Z",'
    '"worker_id":"w1","attempt":1,"expires_at":"2026-01-01T00:15:02Z","reason":"deploy"}',
    "ApprovalGranted": '{"type":"ApprovalGranted","at":"2026-01-01T00:01:00Z","actor":"alice"}',
    "ApprovalRejected": '{"type":"ApprovalRejected","at":"2026-01-01T00:01:00Z","actor":"bob"}',
    "ApprovalExpired": '{"type":"ApprovalExpired","at":"2026-01-01T00:15:03Z"}',
    "WaitStarted": '{"type":"WaitStarted","at":"2026-01-01T00:00:02Z","worker_id":"w1",'
    '"attempt":1,"step":"sleep:1","kind":"sleep","due_at":"2026-01-01T01:00:02Z"}',
    "TimerFired": '{"type":"TimerFired","at":"2026-01-01T01:00:02Z","step":"sleep:1",'
    '"kind":"sleep","due_at":"2026-01-01T01:00:02Z"}',
    "SignalDelivered": '{"type":"SignalDelivered","at":"2026-01-01T00:00:09Z",'
    '"step":"event:paid:1","name":"paid","signal_id":"0b8a2c8e-51a4-4c52-9a63-0d3f0bb1f2aa",'
    '"key":"k1","payload":{"amount":3}}',
    "ChildrenFinished": '{"type":"ChildrenFinished","at":"2026-01-01T00:00:09Z",'
    '"step":"children:1","results":[{"run_id":"0b8a2c8e-51a4-4c52-9a63-0d3f0bb1f2aa",'
    '"key":"a","status":"COMPLETED","result":1}],"finished":1}',
    "RunCompleted": '{"type":"RunCompleted","at":"2026-01-01T00:00:03Z","worker_id":"w1",'
    '"attempt":1}',
    "RunFailed": '{"type":"RunFailed","at":"2026-01-01T00:00:03Z","reason":"boom",'
    '"code":"E-RUN-004"}',
    "RunRequeued": '{"type":"RunRequeued","at":"2026-01-01T00:00:40Z","attempt":1}',
    "LeaseReleased": '{"type":"LeaseReleased","at":"2026-01-01T00:00:05Z","worker_id":"w1",'
    '"attempt":1}',
    "RunCancelled": '{"type":"RunCancelled","at":"2026-01-01T00:00:05Z","actor":"ops"}',
    "RunRetried": '{"type":"RunRetried","at":"2026-01-01T00:00:05Z","actor":"ops",'
    '"max_attempts":6}',
    "RevisionCreated": '{"type":"RevisionCreated","at":"2026-01-01T00:00:00Z","revision_id":'
    '"0b8a2c8e-51a4-4c52-9a63-0d3f0bb1f2aa","contract_family":"policy_routing",'
    '"contract_id":"sre","body_hash":"abc"}',
    "RevisionActivated": '{"type":"RevisionActivated","at":"2026-01-01T00:00:00Z",'
    '"contract_family":"policy_routing","contract_id":"sre","old_revision_id":null,'
    '"new_revision_id":"0b8a2c8e-51a4-4c52-9a63-0d3f0bb1f2aa"}',
}


# Later versions of a type, stored with the fields added since (also never edited).
STORED_LATER = [
    '{"type":"RunRequeued","at":"2026-01-01T00:00:40Z","attempt":1,"worker_id":"w1",'
    '"last_renewal_at":"2026-01-01T00:00:10Z","reason":"the lease of attempt 1 expired"}',
    '{"type":"RunFailed","at":"2026-01-01T00:01:40Z","reason":"Max retry attempts exceeded",'
    '"code":"E-RUN-004","worker_id":"w1","attempt":3,'
    '"last_renewal_at":"2026-01-01T00:01:10Z","dead_letter":true}',
    '{"type":"RunFailed","at":"2026-01-01T00:01:40Z","reason":"KeyError: \'sku\'",'
    '"code":"E-RUN-003","worker_id":"w1","attempt":1,"traceback":"Traceback (most recent '
    'call last):\\n  File \\"h.py\\", line 3, in reserve\\nKeyError: \'sku\'\\n",'
    '"step":"reserve_stock"}',
    '{"type":"LeaseReleased","at":"2026-01-01T00:00:05Z","worker_id":"w1","attempt":1,'
    '"charged":false,"reason":"the attempt was abandoned: DatabaseUnavailableError",'
    '"traceback":"Traceback (most recent call last):\\n","step":null}',
    '{"type":"StepCompleted","at":"2026-01-01T00:00:31Z","worker_id":"w1","attempt":1,'
    '"step":"fetch","result":[1,2],"started_at":"2026-01-01T00:00:01.25Z"}',
    '{"type":"ModelCalled","at":"2026-01-01T00:00:02Z","worker_id":"w1","attempt":1,'
    '"contract_family":"policy_routing","contract_id":"default","model":"qwen",'
    '"revision_id":null,"body_hash":null,"started_at":"2026-01-01T00:00:01.5Z",'
    '"duration_ms":480.25,"outcome":"ok","reason":"","prompt":"Summarise the alert",'
    '"answer":"Disk full on db-1","input_tokens":12,"output_tokens":7}',
]


def test_every_event_type_has_a_stored_example() -> None:
    assert set(STORED) == {t.__name__ for t in ev.EVENT_TYPES}


@pytest.mark.parametrize("name", sorted(STORED))
def test_stored_examples_decode_and_round_trip(name: str) -> None:
    event = ev.decode_event(STORED[name])
    assert ev.event_type(event) == name
    assert ev.decode_event(ev.encode_event(event)) == event


@pytest.mark.parametrize("stored", STORED_LATER)
def test_later_versions_decode_and_round_trip(stored: str) -> None:
    event = ev.decode_event(stored)
    assert ev.decode_event(ev.encode_event(event)) == event
    assert getattr(event, "worker_id", None) == "w1"


def test_older_versions_get_the_defaults_of_later_fields() -> None:
    requeued = ev.decode_event(STORED["RunRequeued"])
    assert isinstance(requeued, ev.RunRequeued)
    assert (requeued.worker_id, requeued.last_renewal_at, requeued.reason) == (None, None, "")
    failed = ev.decode_event(STORED["RunFailed"])
    assert isinstance(failed, ev.RunFailed)
    assert (failed.last_renewal_at, failed.dead_letter) == (None, False)
    assert (failed.traceback, failed.step) == ("", None)
    step = ev.decode_event(STORED["StepCompleted"])
    assert isinstance(step, ev.StepCompleted) and step.started_at is None
    called = ev.decode_event(STORED["ModelCalled"])
    assert isinstance(called, ev.ModelCalled)
    assert (called.prompt, called.answer, called.input_tokens, called.output_tokens) == (
        "",
        "",
        None,
        None,
    )


def test_the_later_fields_decode_as_stored() -> None:
    failed = ev.decode_event(STORED_LATER[2])
    assert isinstance(failed, ev.RunFailed)
    assert failed.step == "reserve_stock"
    assert failed.traceback.endswith("KeyError: 'sku'\n")
    called = ev.decode_event(STORED_LATER[5])
    assert isinstance(called, ev.ModelCalled)
    assert (called.input_tokens, called.output_tokens) == (12, 7)


def test_an_unknown_type_is_a_clear_error() -> None:
    with pytest.raises(ev.UnknownEventTypeError):
        ev.decode_event('{"type":"NoSuchEvent","at":"2026-01-01T00:00:00Z"}')
