"""Every refused delivery is a 4xx with an error code and writes nothing (R-05), fuzzed too."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from awooop.core.config import load_settings
from awooop.core.migrate import migrate
from awooop.ingest import credentials
from tests.support.ingest import Ingest, counts, ingest, ingest_app
from tests.support.properties import ON_DATABASE
from tests.support.services import private_postgres
from tests.support.waiting import eventually
from tests.support.webhooks import CHANNELS, PROJECT, Delivery, fresh, sign

__all__ = ["ingest"]  # the fixture, imported from tests.support.ingest

ID_HEADERS = {"gitea": "X-Gitea-Delivery", "api": "Idempotency-Key"}
PROOF_HEADERS = {
    "telegram": "X-Telegram-Bot-Api-Secret-Token",
    "gitea": "X-Gitea-Signature",
    "line": "X-Line-Signature",
    "alertmanager": "Authorization",
    "api": "Authorization",
}


def without_id(delivery: Delivery) -> Delivery:
    if delivery.channel in ID_HEADERS:
        del delivery.headers[ID_HEADERS[delivery.channel]]
    elif delivery.channel == "telegram":
        del delivery.payload["update_id"]
    elif delivery.channel == "line":
        del delivery.payload["events"][1]["webhookEventId"]
    else:
        del delivery.payload["groupKey"]
    return delivery


def malformed(delivery: Delivery) -> Delivery:
    delivery.raw = delivery.body[:-7]  # truncated JSON
    return delivery


CASES: dict[str, tuple[Callable[[Delivery], Delivery], bool, int, str]] = {
    # name: (mutation, sign correctly, status, code)
    "wrong credential": (lambda d: d, False, 401, "E-AUTH-001"),
    "malformed JSON": (malformed, True, 400, "E-INPUT-001"),
    "missing event id": (without_id, True, 422, "E-INPUT-002"),
    "not an object": (lambda d: Delivery(d.channel, [1, 2], d.headers), True, 400, "E-INPUT-001"),
}


@pytest.mark.parametrize("channel", CHANNELS)
@pytest.mark.parametrize("case", sorted(CASES))
async def test_a_refused_delivery_writes_nothing(ingest: Ingest, channel: str, case: str) -> None:
    mutate, signed, status, code = CASES[case]
    if channel == "gitea" and case == "missing event id":  # only a delivery id can be missing
        await credentials.set_option(ingest.db, PROJECT, "gitea", "gitea_key", "delivery")
    delivery = mutate(fresh(channel))
    if signed:
        sign(delivery, ingest.creds[channel])
    else:
        sign(delivery, ingest.other_creds[channel])  # a valid credential of another project
    before = await counts(ingest.db)
    response = await ingest.post(delivery, signed=False)
    assert (response.status_code, response.json()["code"]) == (status, code), response.text
    assert await counts(ingest.db) == before


@pytest.mark.parametrize("channel", CHANNELS)
async def test_a_missing_proof_is_401(ingest: Ingest, channel: str) -> None:
    delivery = fresh(channel)
    before = await counts(ingest.db)
    response = await ingest.post(delivery, signed=False)
    assert (response.status_code, response.json()["code"]) == (401, "E-AUTH-001")
    assert await counts(ingest.db) == before


async def test_a_signature_over_another_body_is_401(ingest: Ingest) -> None:
    for channel in ("gitea", "line"):
        delivery = sign(fresh(channel), ingest.creds[channel])
        delivery.payload["tampered"] = True
        before = await counts(ingest.db)
        response = await ingest.post(delivery, signed=False)
        assert response.status_code == 401
        assert await counts(ingest.db) == before


async def test_a_project_without_credentials_is_401(ingest: Ingest) -> None:
    delivery = sign(fresh("telegram"), ingest.creds["telegram"])
    before = await counts(ingest.db)
    response = await ingest.client.post(
        "/v1/projects/nobody/channels/telegram", content=delivery.body, headers=delivery.headers
    )
    assert (response.status_code, response.json()["code"]) == (401, "E-AUTH-001")
    assert await counts(ingest.db) == before


async def test_an_unknown_channel_is_404(ingest: Ingest) -> None:
    delivery = sign(fresh("api"), ingest.creds["api"])
    before = await counts(ingest.db)
    response = await ingest.client.post(
        f"/v1/projects/{PROJECT}/channels/slack", content=delivery.body, headers=delivery.headers
    )
    assert (response.status_code, response.json()["code"]) == (404, "E-CHANNEL-001")
    assert await counts(ingest.db) == before


async def test_a_bad_project_or_contract_id_is_400(ingest: Ingest) -> None:
    delivery = sign(fresh("api"), ingest.creds["api"])
    before = await counts(ingest.db)
    for path in (
        "/v1/projects/-bad-/channels/api",
        f"/v1/projects/{'x' * 65}/channels/api",
        f"/v1/projects/{PROJECT}/channels/api?contract_id=a%20b",
    ):
        response = await ingest.client.post(path, content=delivery.body, headers=delivery.headers)
        assert (response.status_code, response.json()["code"]) == (400, "E-INPUT-001"), path
    assert await counts(ingest.db) == before


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_an_oversized_body_is_413(ingest: Ingest, chunked: bool) -> None:
    limit = ingest.services.settings.http_max_body_bytes
    delivery = fresh("api")
    delivery.payload["padding"] = "x" * limit
    sign(delivery, ingest.creds["api"])
    body = delivery.body

    async def stream() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 65536):
            yield body[start : start + 65536]

    before = await counts(ingest.db)
    response = await ingest.client.post(
        delivery.path, content=stream() if chunked else body, headers=delivery.headers
    )
    assert (response.status_code, response.json()["code"]) == (413, "E-INPUT-003")
    assert await counts(ingest.db) == before


async def test_a_lying_content_length_is_still_413(ingest: Ingest) -> None:
    """The limit is enforced on the bytes read, not on what Content-Length claims."""
    limit = ingest.services.settings.http_max_body_bytes
    app = ingest.client._transport.app  # type: ignore[attr-defined]  # the ASGI app under test
    body = b'{"a": "' + b"x" * limit + b'"}'
    sent: list[dict[str, Any]] = []
    chunks = [body[i : i + 65536] for i in range(0, len(body), 65536)]

    async def receive() -> dict[str, Any]:
        chunk = chunks.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": f"/v1/projects/{PROJECT}/channels/api",
        "raw_path": f"/v1/projects/{PROJECT}/channels/api".encode(),
        "query_string": b"",
        "headers": [
            (b"content-length", b"10"),
            (b"authorization", f"Bearer {ingest.creds['api']}".encode()),
            (b"idempotency-key", b"liar"),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("awooop.test", 80),
    }
    before = await counts(ingest.db)
    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    assert start["status"] == 413
    assert await counts(ingest.db) == before


# --- fuzz ----------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
header_text = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"),
    max_size=80,
)


@st.composite
def deliveries(draw: st.DrawFn, channel: str) -> tuple[Delivery, bool]:
    """A delivery of ``channel`` with its payload or headers mangled, and whether to sign it."""
    delivery = fresh(
        channel,
        events=draw(st.integers(0, 3)),
        unique=draw(st.uuids()).hex,
        form=draw(st.booleans()),  # Gitea: JSON or form body
    )
    kind = draw(st.sampled_from(["field", "drop", "any-json", "bytes", "truncate", "headers"]))
    payload = delivery.payload
    if kind == "field":
        target = payload["events"][0] if channel == "line" and payload["events"] else payload
        key = draw(st.sampled_from(sorted(target)))
        target[key] = draw(json_values)
    elif kind == "drop":
        target = payload["events"][0] if channel == "line" and payload["events"] else payload
        del target[draw(st.sampled_from(sorted(target)))]
    elif kind == "any-json":
        delivery.payload = draw(json_values)
    elif kind == "bytes":
        delivery.raw = draw(st.binary(max_size=200))
    elif kind == "truncate":
        body = delivery.body
        delivery.raw = body[: draw(st.integers(0, len(body)))]
    else:
        for name in draw(
            st.lists(st.sampled_from(sorted(delivery.headers)), max_size=3, unique=True)
        ):
            del delivery.headers[name]
        delivery.headers.update(
            draw(st.dictionaries(st.sampled_from(sorted(ID_HEADERS.values())), header_text))
        )
    return delivery, draw(st.integers(0, 3)) > 0  # mostly signed: reach the parser


@settings(ON_DATABASE, max_examples=60)
@given(data=st.data())
@pytest.mark.parametrize("channel", CHANNELS)
async def test_fuzzed_deliveries_never_5xx_and_refusals_write_nothing(
    ingest: Ingest, channel: str, data: st.DataObject
) -> None:
    delivery, signed = data.draw(deliveries(channel))
    if signed:
        sign(delivery, ingest.creds[channel])
    else:
        proof = data.draw(st.one_of(st.none(), header_text))
        if proof is not None:
            delivery.headers[PROOF_HEADERS[channel]] = proof
    before = await counts(ingest.db)
    response = await ingest.post(delivery, signed=False)
    after = await counts(ingest.db)
    assert response.status_code < 500, response.text
    body = response.json()
    event(f"{response.status_code} {body.get('code', '')}")  # --hypothesis-show-statistics
    if response.status_code >= 400:
        assert body["code"].startswith("E-")
        assert after == before
    else:
        created = sum(1 for r in body["results"] if r["status"] == "created")
        assert after["awooop_run_state"] - before["awooop_run_state"] == created
        assert after["awooop_events"] - before["awooop_events"] == created


async def test_postgres_down_is_503_with_a_code_and_ingest_resumes_after(
    redis_server_url: str, redis_prefix: str
) -> None:
    with private_postgres() as server:
        url = server.url.rsplit("/", 1)[0] + "/awooop"
        await migrate(url)
        settings = load_settings(
            environ={},
            database_url=url,
            redis_url=redis_server_url,
            redis_key_prefix=redis_prefix,
            ingest_config_cache_s=0,
        )
        async with ingest_app(settings) as app:
            assert (await app.post(fresh("api"))).status_code == 202
            server.stop()
            response = await app.post(fresh("api"))
            assert (response.status_code, response.json()["code"]) == (503, "E-DB-001")
            server.start()
            delivery = fresh("api")

            async def answered() -> Any:
                response = await app.post(delivery)
                return None if response.status_code == 503 else response

            response = await eventually(  # the pool replaces its dead connections
                answered, interval_s=0.2, what="an answer other than 503 after the restart"
            )
            assert response.status_code == 202, response.text
