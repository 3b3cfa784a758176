"""The channel adapters as pure functions: provider ids (R-02), authentication (R-05), fuzz."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from urllib.parse import urlencode

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from awooop.errors import (
    AuthenticationError,
    AwoooPError,
    InvalidInputError,
    MissingEventIdError,
)
from awooop.ingest import ADAPTERS, alertmanager, auth
from awooop.ingest.common import MAX_JSON_DEPTH, StoredCredential, decode_object
from tests.support.webhooks import (
    ALERTMANAGER_NOTIFICATION,
    CHANNELS,
    GITEA_PUSH,
    LINE_WEBHOOK,
    SECRETS,
    TELEGRAM_UPDATE,
    Delivery,
    fresh,
    sign,
)


def lower(headers: dict[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def stored_for(channel: str, token: str | None = None) -> StoredCredential:
    if channel in SECRETS:
        return StoredCredential(secret=SECRETS[channel])
    assert token is not None
    parsed = auth.parse_token(token)
    assert parsed is not None
    return StoredCredential(token_hash=auth.hash_secret(parsed[1]))


def test_provider_ids_follow_r02() -> None:
    telegram = ADAPTERS["telegram"].parse({}, json.dumps(TELEGRAM_UPDATE).encode())
    assert [e.provider_event_id for e in telegram] == ["10000"]
    assert telegram[0].input == TELEGRAM_UPDATE

    gitea = ADAPTERS["gitea"].parse(
        {"x-gitea-delivery": "f6266f16-1bf3-46a5-9ea4-602e06ead473", "x-gitea-event": "push"},
        json.dumps(GITEA_PUSH).encode(),
    )
    assert [e.provider_event_id for e in gitea] == ["f6266f16-1bf3-46a5-9ea4-602e06ead473"]
    assert gitea[0].input == {"event": "push", "payload": GITEA_PUSH}

    line = ADAPTERS["line"].parse({}, json.dumps(LINE_WEBHOOK).encode())
    assert [e.provider_event_id for e in line] == [
        "01FZ74A0TDDPYRVKNK77XKC3ZR",
        "01FZ74ASS536FW97EX38NKCZQK",
    ]
    assert line[1].input == {
        "destination": LINE_WEBHOOK["destination"],
        "event": LINE_WEBHOOK["events"][1],
    }

    api = ADAPTERS["api"].parse({"idempotency-key": "order-42"}, b'{"order": 42}')
    assert [(e.provider_event_id, e.input) for e in api] == [("order-42", {"order": 42})]


def test_the_alertmanager_id_hashes_group_key_and_sorted_fingerprints() -> None:
    notification = json.loads(json.dumps(ALERTMANAGER_NOTIFICATION))
    key = alertmanager.provider_event_id(notification)
    assert key.startswith("am-") and len(key) == 67
    keys = sorted((a["fingerprint"], a["status"], a["startsAt"]) for a in notification["alerts"])
    expected = hashlib.sha256(
        json.dumps([notification["groupKey"], keys], separators=(",", ":")).encode()
    ).hexdigest()
    assert key == f"am-{expected}"
    # Alert order, labels and annotations do not matter; the group and its alerts do.
    reordered = dict(notification, alerts=list(reversed(notification["alerts"])))
    reordered["commonAnnotations"] = {"summary": "changed text"}
    assert alertmanager.provider_event_id(reordered) == key
    other_group = dict(notification, groupKey=notification["groupKey"] + "x")
    assert alertmanager.provider_event_id(other_group) != key
    fewer = dict(notification, alerts=notification["alerts"][:1])
    assert alertmanager.provider_event_id(fewer) != key
    resolved = dict(
        notification, alerts=[dict(a, status="resolved") for a in notification["alerts"]]
    )
    assert alertmanager.provider_event_id(resolved) != key


@pytest.mark.parametrize("channel", CHANNELS)
def test_a_signed_delivery_authenticates_and_a_tampered_one_does_not(channel: str) -> None:
    adapter = ADAPTERS[channel]
    token = auth.new_token()[1]
    delivery = sign(fresh(channel), SECRETS.get(channel, token))
    stored = stored_for(channel, token)
    adapter.authenticate(lower(delivery.headers), delivery.body, stored)

    wrong = StoredCredential(secret="other", token_hash=auth.hash_secret("other"))
    with pytest.raises(AuthenticationError):
        adapter.authenticate(lower(delivery.headers), delivery.body, wrong)
    with pytest.raises(AuthenticationError):  # nothing configured for the project
        adapter.authenticate(lower(delivery.headers), delivery.body, StoredCredential())
    unsigned = fresh(channel)
    with pytest.raises(AuthenticationError):
        adapter.authenticate(lower(unsigned.headers), unsigned.body, stored)


@pytest.mark.parametrize("channel", ["gitea", "line"])
def test_signatures_cover_the_raw_body(channel: str) -> None:
    delivery = sign(fresh(channel), SECRETS[channel])
    tampered = delivery.body.replace(b'"', b"'", 1)
    with pytest.raises(AuthenticationError):
        ADAPTERS[channel].authenticate(
            lower(delivery.headers), tampered, StoredCredential(secret=SECRETS[channel])
        )


def test_the_signatures_are_the_providers_algorithms() -> None:
    body = b'{"events":[]}'
    digest = hmac.new(b"s3cret", body, hashlib.sha256).digest()
    assert auth.line_signature("s3cret", body) == base64.b64encode(digest).decode()
    assert auth.gitea_signature("s3cret", body) == digest.hex()


def test_gitea_accepts_a_form_encoded_payload() -> None:
    body = urlencode({"payload": json.dumps(GITEA_PUSH)}).encode()
    headers = {
        "content-type": "application/x-www-form-urlencoded",
        "x-gitea-delivery": "d1",
        "x-gitea-event": "push",
        "x-gitea-signature": auth.gitea_signature("k", body),
    }
    ADAPTERS["gitea"].authenticate(headers, body, StoredCredential(secret="k"))
    (event,) = ADAPTERS["gitea"].parse(headers, body)
    assert event.input["payload"] == GITEA_PUSH


def test_tokens_are_shown_once_and_stored_as_a_hash() -> None:
    token_id, token, token_hash = auth.new_token()
    assert auth.parse_token(token) == (token_id, token[21:])  # "awp_" + 16 hex + "_"
    parsed = auth.parse_token(token)
    assert parsed is not None
    assert token_hash == hashlib.sha256(parsed[1].encode()).hexdigest()
    assert parsed[1] not in token_hash
    assert auth.bearer_token_id({"authorization": f"Bearer {token}"}) == token_id
    assert auth.bearer_token_id({"authorization": f"bearer   {token}  "}) == token_id
    assert auth.bearer_token_id({"authorization": f"Basic {token}"}) is None
    assert auth.bearer_token_id({"authorization": "Bearer awp_zz_short"}) is None


@pytest.mark.parametrize(
    ("channel", "body", "headers", "error"),
    [
        ("telegram", b'{"message": {}}', {}, MissingEventIdError),
        ("telegram", b'{"update_id": "12"}', {}, InvalidInputError),
        ("telegram", b'{"update_id": true}', {}, InvalidInputError),
        ("telegram", b'{"update_id": -1}', {}, InvalidInputError),
        ("telegram", b'{"update_id": 1' + b"0" * 300 + b"}", {}, InvalidInputError),
        ("telegram", b"[1]", {}, InvalidInputError),
        ("telegram", b"\xff\xfe", {}, InvalidInputError),
        ("alertmanager", b'{"alerts": [{"fingerprint": "a"}]}', {}, MissingEventIdError),
        ("alertmanager", b'{"groupKey": "g", "alerts": []}', {}, InvalidInputError),
        ("alertmanager", b'{"groupKey": "g", "alerts": [{}]}', {}, MissingEventIdError),
        ("gitea", b"{}", {}, MissingEventIdError),
        ("gitea", b"{}", {"x-gitea-delivery": "x" * 257}, InvalidInputError),
        ("line", b'{"events": [{"type": "follow"}]}', {}, MissingEventIdError),
        ("line", b'{"events": {"webhookEventId": "a"}}', {}, InvalidInputError),
        ("line", b'{"events": ["a"]}', {}, InvalidInputError),
        ("api", b"{}", {}, MissingEventIdError),
        ("api", b"{}", {"idempotency-key": "a\tb"}, InvalidInputError),
        ("api", b'{"a": "\\u0000"}', {"idempotency-key": "k"}, InvalidInputError),
        ("api", b'{"a": "\\ud800"}', {"idempotency-key": "k"}, InvalidInputError),
        ("api", b"[" * 2000 + b"]" * 2000, {"idempotency-key": "k"}, InvalidInputError),
    ],
)
def test_malformed_payloads_are_refused_with_a_code(
    channel: str, body: bytes, headers: dict[str, str], error: type[AwoooPError]
) -> None:
    with pytest.raises(error) as info:
        ADAPTERS[channel].parse(headers, body)
    assert info.value.http_status in (400, 422)


def test_deep_nesting_and_nul_are_refused_but_an_escaped_backslash_is_fine() -> None:
    deep = b'{"a": ' + b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH + b"}"
    with pytest.raises(InvalidInputError):
        decode_object(deep)
    shallow = b'{"a": ' + b"[" * (MAX_JSON_DEPTH - 1) + b"]" * (MAX_JSON_DEPTH - 1) + b"}"
    assert decode_object(shallow)["a"]
    assert decode_object(b'{"path": "C:\\\\u0000dir"}') == {"path": "C:\\u0000dir"}
    with pytest.raises(InvalidInputError):
        decode_object(b'{"k\\u0000": 1}')


# --- fuzz: any bytes and headers give a catalog 4xx or events, never another exception ------

header_names = st.sampled_from(
    [
        "x-telegram-bot-api-secret-token",
        "x-gitea-signature",
        "x-gitea-delivery",
        "x-gitea-event",
        "x-line-signature",
        "authorization",
        "idempotency-key",
        "content-type",
    ]
)
header_values = st.one_of(
    st.text(max_size=300),
    st.just("application/x-www-form-urlencoded"),
    st.builds(lambda t: f"Bearer {t}", st.text(max_size=80)),
)
json_bodies = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=20,
).map(lambda v: json.dumps(v).encode())
realistic = st.sampled_from(CHANNELS).map(lambda c: fresh(c).body)
bodies = st.one_of(st.binary(max_size=300), json_bodies, realistic)


@settings(max_examples=400, deadline=None)
@given(
    channel=st.sampled_from(CHANNELS),
    headers=st.dictionaries(header_names, header_values, max_size=5),
    body=bodies,
    secret=st.one_of(st.none(), st.text(min_size=1, max_size=40)),
)
def test_adapters_raise_only_catalog_4xx_errors(
    channel: str, headers: dict[str, str], body: bytes, secret: str | None
) -> None:
    adapter = ADAPTERS[channel]
    stored = StoredCredential(secret=secret, token_hash=None if secret is None else "0" * 64)
    try:
        adapter.authenticate(headers, body, stored)
        auth_status = None
    except AwoooPError as exc:
        auth_status = exc.http_status
    assert auth_status in (None, 401)
    try:
        events = adapter.parse(headers, body)
        parse_status = None
    except AwoooPError as exc:
        events, parse_status = [], exc.http_status
    assert parse_status in (None, 400, 422)
    for event in events:
        assert 1 <= len(event.provider_event_id) <= 256
        json.dumps(event.input)  # storable input


@settings(max_examples=200, deadline=None)
@given(channel=st.sampled_from(CHANNELS), data=st.data())
def test_signed_realistic_deliveries_always_parse(channel: str, data: st.DataObject) -> None:
    token = auth.new_token()[1]
    delivery: Delivery = fresh(channel, events=data.draw(st.integers(0, 5)))
    sign(delivery, SECRETS.get(channel, token))
    adapter = ADAPTERS[channel]
    adapter.authenticate(lower(delivery.headers), delivery.body, stored_for(channel, token))
    events = adapter.parse(lower(delivery.headers), delivery.body)
    assert [e.provider_event_id for e in events] == delivery.ids()
