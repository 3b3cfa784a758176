"""The channel adapters as pure functions: provider ids (R-02), authentication (R-05), what
each provider signs (Gitea: the JSON, also inside a form body), the Gitea key that makes a
replay the same event, LINE's freshness bound, fuzz."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from awooop.core.errors import (
    AuthenticationError,
    AwoooPError,
    InvalidInputError,
    MissingEventIdError,
    StaleDeliveryError,
)
from awooop.ingest import ADAPTERS, alertmanager, auth, gitea
from awooop.ingest.common import (
    DEFAULT_OPTIONS,
    MAX_JSON_DEPTH,
    ChannelOptions,
    ParsedEvent,
    StoredCredential,
    decode_object,
)
from tests.support.webhooks import (
    ALERTMANAGER_NOTIFICATION,
    CHANNELS,
    GITEA_FORM,
    GITEA_PUSH,
    LINE_WEBHOOK,
    SECRETS,
    TELEGRAM_UPDATE,
    Delivery,
    fresh,
    go_form,
    go_json,
    replay,
    sign,
)

LINE_SENT_AT = LINE_WEBHOOK["events"][0]["timestamp"] / 1000  # when LINE sent the fixture
BY_DELIVERY = ChannelOptions(gitea_key="delivery")


def lower(headers: dict[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def stored_for(channel: str, token: str | None = None) -> StoredCredential:
    if channel in SECRETS:
        return StoredCredential(secret=SECRETS[channel])
    assert token is not None
    parsed = auth.parse_token(token)
    assert parsed is not None
    return StoredCredential(token_hash=auth.hash_secret(parsed[1]))


def parse(
    channel: str,
    headers: dict[str, str],
    body: bytes,
    options: ChannelOptions = DEFAULT_OPTIONS,
    now: float | None = None,
) -> list[ParsedEvent]:
    return ADAPTERS[channel].parse(headers, body, options, time.time() if now is None else now)


def test_provider_ids_follow_r02() -> None:
    telegram = parse("telegram", {}, json.dumps(TELEGRAM_UPDATE).encode())
    assert [e.provider_event_id for e in telegram] == ["10000"]
    assert telegram[0].input == TELEGRAM_UPDATE

    gitea_headers = {
        "x-gitea-delivery": "f6266f16-1bf3-46a5-9ea4-602e06ead473",
        "x-gitea-event": "push",
    }
    payload = go_json(GITEA_PUSH)
    by_body = parse("gitea", gitea_headers, payload)
    assert [e.provider_event_id for e in by_body] == [
        "sha256:" + hashlib.sha256(payload).hexdigest()
    ]
    assert by_body[0].input == {
        "event": "push",
        "delivery": "f6266f16-1bf3-46a5-9ea4-602e06ead473",
        "payload": GITEA_PUSH,
    }
    by_delivery = parse("gitea", gitea_headers, payload, BY_DELIVERY)
    assert [e.provider_event_id for e in by_delivery] == ["f6266f16-1bf3-46a5-9ea4-602e06ead473"]
    assert by_delivery[0].input == by_body[0].input

    line = parse("line", {}, json.dumps(LINE_WEBHOOK).encode(), now=LINE_SENT_AT)
    assert [e.provider_event_id for e in line] == [
        "01FZ74A0TDDPYRVKNK77XKC3ZR",
        "01FZ74ASS536FW97EX38NKCZQK",
    ]
    assert line[1].input == {
        "destination": LINE_WEBHOOK["destination"],
        "event": LINE_WEBHOOK["events"][1],
    }

    api = parse("api", {"idempotency-key": "order-42"}, b'{"order": 42}')
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


# A small Gitea payload as Go's json.MarshalIndent writes it, and the form body Go's
# url.Values{"payload": ...}.Encode() makes of it, encoded here by hand from Go's rules
# (space '+', unreserved A-Z a-z 0-9 - _ . ~ kept, every other byte %XX, UTF-8 bytes one by
# one): the test helpers must produce exactly these bytes.
GO_PAYLOAD = {"ref": "refs/heads/main", "msg": "café <ok> & done"}
GO_JSON = b'{\n  "ref": "refs/heads/main",\n  "msg": "caf\xc3\xa9 \\u003cok\\u003e \\u0026 done"\n}'
GO_FORM = (
    b"payload=%7B%0A++%22ref%22%3A+%22refs%2Fheads%2Fmain%22%2C%0A++%22msg%22%3A+"
    b"%22caf%C3%A9+%5Cu003cok%5Cu003e+%5Cu0026+done%22%0A%7D"
)


def test_the_helpers_build_gitea_deliveries_byte_for_byte_as_go_does() -> None:
    assert go_json(GO_PAYLOAD) == GO_JSON
    assert go_form({"payload": GO_JSON}) == GO_FORM
    assert json.loads(GO_JSON) == GO_PAYLOAD


def test_a_gitea_form_delivery_is_verified_against_the_signed_json() -> None:
    headers = {
        "content-type": GITEA_FORM,
        "x-gitea-delivery": "d1",
        "x-gitea-event": "push",
        "x-gitea-signature": auth.gitea_signature("k", GO_JSON),
    }
    assert gitea.signed_payload(headers, GO_FORM) == GO_JSON
    ADAPTERS["gitea"].authenticate(headers, GO_FORM, StoredCredential(secret="k"))
    (event,) = parse("gitea", headers, GO_FORM)
    assert event.input["payload"] == GO_PAYLOAD
    assert event.provider_event_id == "sha256:" + hashlib.sha256(GO_JSON).hexdigest()
    # The same payload as a JSON delivery is the same event.
    as_json = dict(headers, **{"content-type": "application/json"})
    ADAPTERS["gitea"].authenticate(as_json, GO_JSON, StoredCredential(secret="k"))
    assert parse("gitea", as_json, GO_JSON) == [event]
    # A signature over the form body is not what Gitea sends: refused.
    over_the_form = dict(headers, **{"x-gitea-signature": auth.gitea_signature("k", GO_FORM)})
    with pytest.raises(AuthenticationError):
        ADAPTERS["gitea"].authenticate(over_the_form, GO_FORM, StoredCredential(secret="k"))
    # A field added beside the signed payload changes nothing; a second payload is refused.
    extra = GO_FORM + b"&note=hello"
    ADAPTERS["gitea"].authenticate(headers, extra, StoredCredential(secret="k"))
    assert parse("gitea", headers, extra) == [event]
    twice = GO_FORM + b"&payload=%7B%7D"
    with pytest.raises(AuthenticationError):
        ADAPTERS["gitea"].authenticate(headers, twice, StoredCredential(secret="k"))
    with pytest.raises(InvalidInputError):
        parse("gitea", headers, twice)


@pytest.mark.parametrize("form", [False, True], ids=["json", "form"])
def test_a_gitea_replay_is_the_same_event_unless_keyed_by_delivery(form: bool) -> None:
    first = sign(fresh("gitea", form=form), SECRETS["gitea"])
    again = replay(first)
    assert again.headers["X-Gitea-Delivery"] != first.headers["X-Gitea-Delivery"]
    assert again.headers["X-Gitea-Signature"] == first.headers["X-Gitea-Signature"]
    stored = StoredCredential(secret=SECRETS["gitea"])
    for delivery in (first, again):
        ADAPTERS["gitea"].authenticate(lower(delivery.headers), delivery.body, stored)
    [one] = parse("gitea", lower(first.headers), first.body)
    [two] = parse("gitea", lower(again.headers), again.body)
    assert one.provider_event_id == two.provider_event_id == first.ids()[0]
    assert (one.input["delivery"], two.input["delivery"]) == (
        first.headers["X-Gitea-Delivery"],
        again.headers["X-Gitea-Delivery"],
    )
    [one] = parse("gitea", lower(first.headers), first.body, BY_DELIVERY)
    [two] = parse("gitea", lower(again.headers), again.body, BY_DELIVERY)
    assert [one.provider_event_id, two.provider_event_id] == [
        first.headers["X-Gitea-Delivery"],
        again.headers["X-Gitea-Delivery"],
    ]
    other = fresh("gitea", form=form)  # another push: another key
    assert parse("gitea", lower(other.headers), other.body)[0].provider_event_id != first.ids()[0]


def line_body(age_s: float, redelivery: bool = False, now: float = 1_800_000_000.0) -> bytes:
    """A LINE request of two events: one sent at ``now``, one ``age_s`` before it."""
    young = dict(LINE_WEBHOOK["events"][1], timestamp=int(now * 1000))
    old = dict(
        LINE_WEBHOOK["events"][0],
        timestamp=int((now - age_s) * 1000),
        deliveryContext={"isRedelivery": redelivery},
    )
    return json.dumps(dict(LINE_WEBHOOK, events=[young, old])).encode()


def test_line_events_older_than_the_bound_are_refused_with_a_code() -> None:
    now = 1_800_000_000.0
    young = dict(LINE_WEBHOOK["events"][1], timestamp=int(now * 1000))
    body = json.dumps(dict(LINE_WEBHOOK, events=[young])).encode()
    assert len(parse("line", {}, body, now=now)) == 1
    assert len(parse("line", {}, line_body(3599, now=now), now=now)) == 2
    with pytest.raises(StaleDeliveryError) as info:
        parse("line", {}, line_body(3601, now=now), now=now)  # one stale event refuses all
    assert (info.value.code, info.value.http_status) == ("E-INGEST-004", 403)
    assert "max_event_age_s" in info.value.message
    tight = ChannelOptions(max_event_age_s=60)
    with pytest.raises(StaleDeliveryError):
        parse("line", {}, line_body(61, now=now), tight, now=now)
    # From the future (clock skew): accepted.
    assert len(parse("line", {}, line_body(-600, now=now), now=now)) == 2


def test_line_redeliveries_have_their_own_bound() -> None:
    now = 1_800_000_000.0
    assert len(parse("line", {}, line_body(7200, redelivery=True, now=now), now=now)) == 2
    assert len(parse("line", {}, line_body(86_000, redelivery=True, now=now), now=now)) == 2
    with pytest.raises(StaleDeliveryError) as info:
        parse("line", {}, line_body(86_401, redelivery=True, now=now), now=now)
    assert "max_redelivery_age_s" in info.value.message
    with pytest.raises(StaleDeliveryError):  # not flagged by LINE: the ordinary bound
        parse("line", {}, line_body(7200, now=now), now=now)
    # A redelivery bound below the ordinary one never makes redeliveries stricter.
    odd = ChannelOptions(max_event_age_s=3600, max_redelivery_age_s=10)
    assert len(parse("line", {}, line_body(3000, redelivery=True, now=now), odd, now)) == 2


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
        ("gitea", b"{}", {}, MissingEventIdError),  # keyed by delivery (below)
        ("gitea", b"{}", {"x-gitea-delivery": "x" * 257}, InvalidInputError),
        ("gitea", b"a=1", {"content-type": GITEA_FORM}, InvalidInputError),
        (
            "gitea",
            b"payload=%7B%7D&payload=%7B%7D",
            {"content-type": GITEA_FORM},
            InvalidInputError,
        ),
        ("gitea", b"payload=%5B%5D", {"content-type": GITEA_FORM}, InvalidInputError),
        ("gitea", b"payload=\xff", {"content-type": GITEA_FORM}, InvalidInputError),
        ("line", b'{"events": [{"type": "follow"}]}', {}, MissingEventIdError),
        ("line", b'{"events": [{"webhookEventId": "a"}]}', {}, InvalidInputError),
        ("line", b'{"events": [{"webhookEventId": "a", "timestamp": "1"}]}', {}, InvalidInputError),
        ("line", b'{"events": [{"webhookEventId": "a", "timestamp": -1}]}', {}, InvalidInputError),
        ("line", b'{"events": [{"webhookEventId": "a", "timestamp": 0}]}', {}, StaleDeliveryError),
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
        parse(channel, headers, body, BY_DELIVERY)
    assert info.value.http_status in (400, 403, 422)


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
    gitea_key=st.sampled_from(["body", "delivery"]),
)
def test_adapters_raise_only_catalog_4xx_errors(
    channel: str, headers: dict[str, str], body: bytes, secret: str | None, gitea_key: str
) -> None:
    adapter = ADAPTERS[channel]
    stored = StoredCredential(secret=secret, token_hash=None if secret is None else "0" * 64)
    try:
        adapter.authenticate(headers, body, stored)
        auth_status = None
    except AwoooPError as exc:
        auth_status = exc.http_status
    assert auth_status in (None, 401)
    options = ChannelOptions(gitea_key=gitea_key)
    try:
        events = adapter.parse(headers, body, options, time.time())
        parse_status = None
    except AwoooPError as exc:
        events, parse_status = [], exc.http_status
    assert parse_status in (None, 400, 403, 422)
    for event in events:
        assert 1 <= len(event.provider_event_id) <= 256
        json.dumps(event.input)  # storable input


@settings(max_examples=200, deadline=None)
@given(channel=st.sampled_from(CHANNELS), data=st.data())
def test_signed_realistic_deliveries_always_parse(channel: str, data: st.DataObject) -> None:
    token = auth.new_token()[1]
    delivery: Delivery = fresh(
        channel, events=data.draw(st.integers(0, 5)), form=data.draw(st.booleans())
    )
    sign(delivery, SECRETS.get(channel, token))
    adapter = ADAPTERS[channel]
    adapter.authenticate(lower(delivery.headers), delivery.body, stored_for(channel, token))
    events = parse(channel, lower(delivery.headers), delivery.body)
    assert [e.provider_event_id for e in events] == delivery.ids()
