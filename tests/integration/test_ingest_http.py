"""The ingest route on real Postgres and Redis (in-process ASGI client): R-01 to R-05."""

from __future__ import annotations

import asyncio
import time
import uuid

import msgspec
import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import REGISTRY
from structlog.testing import capture_logs

from awooop.core.config import Settings
from awooop.core.events import RunCreated, decode_event, run_stream_id
from awooop.core.telemetry import configure_tracing
from awooop.eventlog import eventlog
from awooop.ingest import credentials
from tests.support.ingest import Ingest, counts, ingest, ingest_app
from tests.support.webhooks import (
    CHANNELS,
    OTHER_PROJECT,
    PROJECT,
    SECRETS,
    Delivery,
    fresh,
    replay,
    sign,
)

__all__ = ["ingest"]  # the fixture, imported from tests.support.ingest


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.mark.parametrize("channel", CHANNELS)
async def test_a_delivery_creates_runs_and_a_repeat_returns_them(
    ingest: Ingest, channel: str
) -> None:
    delivery = fresh(channel)
    before = metric("awooop_ingest_events_total", channel_type=channel, outcome="created")
    first = await ingest.post(delivery)
    assert first.status_code == 202, first.text
    body = first.json()
    expected = delivery.ids()
    assert [r["provider_event_id"] for r in body["results"]] == expected
    assert all(r["status"] == "created" for r in body["results"])
    run_ids = body["run_ids"]
    assert len(set(run_ids)) == len(expected)

    repeat = await ingest.post(delivery)
    assert repeat.status_code == 200, repeat.text
    again = repeat.json()
    assert again["code"] == "E-IDEMPOTENT-001"
    assert again["run_id"] == run_ids[0]
    assert again["run_ids"] == run_ids
    assert {r["code"] for r in again["results"]} == {"E-IDEMPOTENT-001"}

    after = metric("awooop_ingest_events_total", channel_type=channel, outcome="created")
    assert after - before == len(expected)
    async with ingest.db.tenant(PROJECT) as conn:
        for run_id, key in zip(run_ids, expected, strict=True):
            state = await conn.fetchrow(
                "SELECT status, channel_type, provider_event_id, max_attempts, contract_id "
                "FROM awooop_run_state WHERE run_id = $1",
                uuid.UUID(run_id),
            )
            assert dict(state.items()) == {
                "status": "PENDING",
                "channel_type": channel,
                "provider_event_id": key,
                "max_attempts": ingest.services.settings.max_attempts,
                "contract_id": "default",
            }
            (created,) = await eventlog.read_stream(conn, run_stream_id(uuid.UUID(run_id)))
            assert created.event_type == "RunCreated"
            assert created.metadata["source"] == "http"
            assert created.metadata["traceparent"].startswith("00-")
            dedupe = await conn.fetchrow(
                "SELECT run_id, created_at, expires_at - created_at AS ttl "
                "FROM awooop_channel_event_dedupe WHERE channel_type = $1 "
                "AND provider_event_id = $2",
                channel,
                key,
            )
            assert dedupe["run_id"] == uuid.UUID(run_id)
            assert created.decode().at == dedupe["created_at"]
            assert dedupe["ttl"].total_seconds() == ingest.services.settings.dedupe_ttl_s


async def test_the_input_of_each_channel_is_the_provider_payload(ingest: Ingest) -> None:
    inputs = {}
    for channel in CHANNELS:
        delivery = fresh(channel, events=1)
        response = await ingest.post(delivery)
        async with ingest.db.tenant(PROJECT) as conn:
            inputs[channel] = (
                delivery,
                await conn.fetchval(
                    "SELECT input FROM awooop_run_state WHERE run_id = $1",
                    uuid.UUID(response.json()["run_ids"][0]),
                ),
            )
    assert inputs["telegram"][1] == inputs["telegram"][0].payload
    assert inputs["alertmanager"][1] == inputs["alertmanager"][0].payload
    assert inputs["api"][1] == inputs["api"][0].payload
    assert inputs["gitea"][1] == {
        "event": "push",
        "delivery": inputs["gitea"][0].headers["X-Gitea-Delivery"],
        "payload": inputs["gitea"][0].payload,
    }
    line_delivery, line_input = inputs["line"]
    assert line_input == {
        "destination": line_delivery.payload["destination"],
        "event": line_delivery.payload["events"][0],
    }


async def test_a_gitea_form_delivery_is_accepted_and_its_replay_is_the_same_event(
    ingest: Ingest,
) -> None:
    """Gitea signs the JSON and sends it as the form field ``payload``; its "replay" sends the
    same payload under a new X-Gitea-Delivery: one run, and the replay gets its run_id."""
    delivery = sign(fresh("gitea", form=True), ingest.creds["gitea"])
    assert delivery.body.startswith(b"payload=%7B%0A++%22ref%22")  # the form, not the JSON
    first = await ingest.post(delivery, signed=False)
    assert first.status_code == 202, first.text
    [run_id] = first.json()["run_ids"]
    before = await counts(ingest.db)

    again = replay(delivery)  # the same body and signature, a new delivery id
    assert again.body == delivery.body
    response = await ingest.post(again, signed=False)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert (answer["code"], answer["run_id"]) == ("E-IDEMPOTENT-001", run_id)
    assert answer["results"][0]["provider_event_id"] == delivery.ids()[0]
    as_json = replay(delivery)  # the same event delivered by a JSON webhook
    as_json.headers["Content-Type"] = "application/json"
    response = await ingest.post(as_json, signed=False)
    assert (response.status_code, response.json()["run_id"]) == (200, run_id)
    assert await counts(ingest.db) == before
    async with ingest.db.tenant(PROJECT) as conn:
        stored = await conn.fetchval(
            "SELECT input FROM awooop_run_state WHERE run_id = $1", uuid.UUID(run_id)
        )
    assert stored == {
        "event": "push",
        "delivery": delivery.headers["X-Gitea-Delivery"],
        "payload": delivery.payload,
    }


async def test_gitea_keyed_by_delivery_makes_each_replay_a_run(ingest: Ingest) -> None:
    await credentials.set_option(ingest.db, PROJECT, "gitea", "gitea_key", "delivery")
    delivery = sign(fresh("gitea", form=True), ingest.creds["gitea"])
    first = await ingest.post(delivery, signed=False)
    assert first.status_code == 202
    assert first.json()["results"][0]["provider_event_id"] == delivery.headers["X-Gitea-Delivery"]
    repeat = await ingest.post(delivery, signed=False)  # the same delivery id: a duplicate
    assert (repeat.status_code, repeat.json()["run_ids"]) == (200, first.json()["run_ids"])
    again = await ingest.post(replay(delivery), signed=False)
    assert again.status_code == 202
    assert again.json()["run_ids"] != first.json()["run_ids"]


def aged(delivery: Delivery, age_s: float, redelivery: bool = False) -> Delivery:
    """The LINE delivery with its events sent ``age_s`` ago (as LINE stamps them)."""
    sent_ms = int((time.time() - age_s) * 1000)
    for event in delivery.payload["events"]:
        event["timestamp"] = sent_ms
        event["deliveryContext"] = {"isRedelivery": redelivery}
    return delivery


async def test_a_line_delivery_older_than_the_bound_is_refused_and_writes_nothing(
    ingest: Ingest,
) -> None:
    before = await counts(ingest.db)
    stale = aged(fresh("line"), 2 * 3600)  # the default bound is one hour
    response = await ingest.post(stale)
    assert response.status_code == 403, response.text
    assert response.json()["code"] == "E-INGEST-004"
    assert "max_event_age_s" in response.json()["message"]
    assert await counts(ingest.db) == before

    # LINE's own redelivery of the same events is accepted within its window (a day).
    redelivered = aged(fresh("line"), 2 * 3600, redelivery=True)
    assert (await ingest.post(redelivered)).status_code == 202

    # The bound is the channel's: ten minutes for this project, the default for another.
    await credentials.set_option(ingest.db, PROJECT, "line", "max_event_age_s", "600")
    await asyncio.sleep(ingest.services.settings.ingest_config_cache_s)  # the cached config
    quarter = aged(fresh("line"), 900)
    before = await counts(ingest.db)
    refused = await ingest.post(quarter)
    assert (refused.status_code, refused.json()["code"]) == (403, "E-INGEST-004")
    assert await counts(ingest.db) == before
    elsewhere = aged(fresh("line"), 900)
    response = await ingest.client.post(
        f"/v1/projects/{OTHER_PROJECT}/channels/line",
        content=sign(elsewhere, ingest.other_creds["line"]).body,
        headers=elsewhere.headers,
    )
    assert response.status_code == 202, response.text


async def test_line_answers_per_event_when_some_events_are_new(ingest: Ingest) -> None:
    delivery = fresh("line", events=2)
    first = (await ingest.post(delivery)).json()
    delivery.payload["events"].append(fresh("line", events=1).payload["events"][0])
    response = await ingest.post(delivery)
    assert response.status_code == 202
    results = response.json()["results"]
    assert [r["status"] for r in results] == ["duplicate", "duplicate", "created"]
    assert [r["run_id"] for r in results[:2]] == first["run_ids"]
    assert results[0]["code"] == "E-IDEMPOTENT-001"


async def test_line_webhook_verification_creates_nothing(ingest: Ingest) -> None:
    delivery = fresh("line")
    delivery.payload["events"] = []
    before = await counts(ingest.db)
    response = await ingest.post(delivery)
    assert response.status_code == 200
    assert response.json() == {"run_ids": [], "results": []}
    assert await counts(ingest.db) == before


async def test_a_key_repeated_inside_one_line_request_is_one_run(ingest: Ingest) -> None:
    delivery = fresh("line", events=1)
    delivery.payload["events"].append(dict(delivery.payload["events"][0]))
    response = await ingest.post(delivery)
    assert response.status_code == 202
    results = response.json()["results"]
    assert [r["status"] for r in results] == ["created", "duplicate"]
    assert results[0]["run_id"] == results[1]["run_id"]


@pytest.mark.parametrize("channel", CHANNELS)
@pytest.mark.connections(15)
async def test_100_concurrent_identical_deliveries_make_one_run(
    ingest: Ingest, channel: str
) -> None:
    delivery = sign(fresh(channel, events=1), ingest.creds[channel])
    before = await counts(ingest.db)
    responses = await asyncio.gather(*(ingest.post(delivery, signed=False) for _ in range(100)))
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * 99 + [202], {r.status_code: r.text for r in responses}
    assert len({r.json()["run_ids"][0] for r in responses}) == 1
    after = await counts(ingest.db)
    assert {t: after[t] - before[t] for t in after} == dict.fromkeys(after, 1)


async def test_an_alertmanager_resolve_is_a_new_event_but_a_resend_is_not(ingest: Ingest) -> None:
    firing = fresh("alertmanager")
    first = await ingest.post(firing)
    resend = fresh("alertmanager")
    resend.payload = dict(firing.payload, receiver="awooop")  # same group, same alerts
    assert (await ingest.post(resend)).status_code == 200
    resolved = fresh("alertmanager")
    resolved.payload = dict(
        firing.payload,
        status="resolved",
        alerts=[dict(a, status="resolved") for a in firing.payload["alerts"]],
    )
    second = await ingest.post(resolved)
    assert second.status_code == 202
    assert second.json()["run_ids"] != first.json()["run_ids"]


async def test_max_attempts_comes_from_the_active_agent_contract(ingest: Ingest) -> None:
    async with ingest.db.tenant(PROJECT) as conn:
        for contract, attempts in (("default", 7), ("triage", 2)):
            revision = await conn.fetchval(
                "INSERT INTO awooop_contract_revisions "
                "(project_id, contract_family, contract_id, body, body_hash) "
                "VALUES ($1, 'agent', $2, $3, 'h') RETURNING revision_id",
                PROJECT,
                contract,
                {"max_attempts": attempts, "model": "local"},
            )
            await conn.execute(
                "INSERT INTO awooop_active_revisions "
                "(project_id, contract_family, contract_id, active_revision_id) "
                "VALUES ($1, 'agent', $2, $3)",
                PROJECT,
                contract,
                revision,
            )
    got = {}
    for query in ("", "?contract_id=triage", "?contract_id=unknown"):
        delivery = sign(fresh("api"), ingest.creds["api"])
        response = await ingest.client.post(
            delivery.path + query, content=delivery.body, headers=delivery.headers
        )
        async with ingest.db.tenant(PROJECT) as conn:
            got[query] = tuple(
                await conn.fetchrow(
                    "SELECT max_attempts, contract_id FROM awooop_run_state WHERE run_id = $1",
                    uuid.UUID(response.json()["run_ids"][0]),
                )
            )
    default = ingest.services.settings.max_attempts
    assert got == {
        "": (7, "default"),
        "?contract_id=triage": (2, "triage"),
        "?contract_id=unknown": (default, "unknown"),
    }


async def test_a_per_channel_ttl_sets_the_dedupe_expiry(ingest: Ingest) -> None:
    await credentials.set_dedupe_ttl(ingest.db, PROJECT, "telegram", 90)
    delivery = fresh("telegram")
    assert (await ingest.post(delivery)).status_code == 202
    async with ingest.db.tenant(PROJECT) as conn:
        ttl = await conn.fetchval(
            "SELECT expires_at - created_at FROM awooop_channel_event_dedupe "
            "WHERE provider_event_id = $1",
            delivery.ids()[0],
        )
    assert ttl.total_seconds() == 90


async def test_after_the_ttl_the_same_key_creates_a_new_run(ingest: Ingest) -> None:
    await credentials.set_dedupe_ttl(ingest.db, PROJECT, "gitea", 1)
    delivery = fresh("gitea")
    first = (await ingest.post(delivery)).json()["run_ids"]
    assert (await ingest.post(delivery)).status_code == 200
    await asyncio.sleep(1.2)  # the TTL is 1 s; the expiry loop has not run
    again = await ingest.post(delivery)
    assert again.status_code == 202
    assert again.json()["run_ids"] != first
    async with ingest.db.tenant(PROJECT) as conn:
        runs = await conn.fetchval(
            "SELECT count(*) FROM awooop_run_state WHERE provider_event_id = $1",
            delivery.ids()[0],
        )
        dedupe = await conn.fetch(
            "SELECT DISTINCT run_id FROM awooop_channel_event_dedupe WHERE provider_event_id = $1",
            delivery.ids()[0],
        )
    assert runs == 2
    assert [str(r["run_id"]) for r in dedupe] == again.json()["run_ids"]


async def test_projects_do_not_share_keys_or_credentials(ingest: Ingest) -> None:
    delivery = fresh("api")
    first = await ingest.post(delivery)
    # The same key in the other project is a different event, with that project's token.
    other = fresh("api")
    other.headers["Idempotency-Key"] = delivery.headers["Idempotency-Key"]
    sign(other, ingest.other_creds["api"])
    response = await ingest.client.post(
        f"/v1/projects/{OTHER_PROJECT}/channels/api", content=other.body, headers=other.headers
    )
    assert response.status_code == 202
    assert response.json()["run_ids"] != first.json()["run_ids"]
    # ...and p1's token does not open p2.
    sign(other, ingest.creds["api"])
    response = await ingest.client.post(
        f"/v1/projects/{OTHER_PROJECT}/channels/api", content=other.body, headers=other.headers
    )
    assert response.status_code == 401


async def test_get_run_is_tenant_scoped(ingest: Ingest) -> None:
    created = await ingest.post(fresh("telegram"))
    run_id = created.json()["run_ids"][0]
    _, mine = await credentials.create_management_token(ingest.db, PROJECT, "manage")
    _, theirs = await credentials.create_management_token(ingest.db, OTHER_PROJECT, "manage")
    auth = {"Authorization": f"Bearer {mine}"}
    response = await ingest.client.get(f"/v1/projects/{PROJECT}/runs/{run_id}", headers=auth)
    assert response.status_code == 200
    assert response.json()["run_id"] == run_id
    assert response.json()["status"] == "PENDING"

    other_auth = {"Authorization": f"Bearer {theirs}"}
    response = await ingest.client.get(
        f"/v1/projects/{OTHER_PROJECT}/runs/{run_id}", headers=other_auth
    )
    assert response.status_code == 404
    assert response.json()["code"] == "E-RUN-003"
    # p1's token on p2's path, an ingest token, no token, a bad id:
    response = await ingest.client.get(f"/v1/projects/{OTHER_PROJECT}/runs/{run_id}", headers=auth)
    assert (response.status_code, response.json()["code"]) == (403, "E-AUTH-002")
    ingest_auth = {"Authorization": f"Bearer {ingest.creds['api']}"}
    response = await ingest.client.get(f"/v1/projects/{PROJECT}/runs/{run_id}", headers=ingest_auth)
    assert (response.status_code, response.json()["code"]) == (403, "E-AUTH-003")
    response = await ingest.client.get(f"/v1/projects/{PROJECT}/runs/{run_id}")
    assert (response.status_code, response.json()["code"]) == (401, "E-AUTH-001")
    response = await ingest.client.get(f"/v1/projects/{PROJECT}/runs/not-a-uuid", headers=auth)
    assert (response.status_code, response.json()["code"]) == (404, "E-RUN-003")


async def test_a_management_token_is_not_an_ingest_token(ingest: Ingest) -> None:
    _, manage = await credentials.create_management_token(ingest.db, PROJECT, "manage")
    before = await counts(ingest.db)
    response = await ingest.post(sign(fresh("api"), manage), signed=False)
    assert (response.status_code, response.json()["code"]) == (401, "E-AUTH-001")
    assert await counts(ingest.db) == before


async def test_a_revoked_token_is_refused_once_the_config_cache_ages_out(
    settings: Settings,
) -> None:
    async with ingest_app(msgspec.structs.replace(settings, ingest_config_cache_s=0.5)) as app:
        token_id, token = await credentials.create_token(app.db, PROJECT, "api")
        assert (await app.post(sign(fresh("api"), token), signed=False)).status_code == 202
        assert await credentials.revoke_token(app.db, PROJECT, token_id)
        # Within the cache age the revoked token still works (documented lag)...
        assert (await app.post(sign(fresh("api"), token), signed=False)).status_code == 202
        await asyncio.sleep(0.6)  # the 0.5 s config cache ages out
        response = await app.post(sign(fresh("api"), token), signed=False)
        assert (response.status_code, response.json()["code"]) == (401, "E-AUTH-001")


async def test_a_new_secret_works_at_once_despite_the_cache(ingest: Ingest) -> None:
    assert (await ingest.post(fresh("line"))).status_code == 202  # caches the old secret
    await credentials.set_secret(ingest.db, PROJECT, "line", "rotated-secret")
    response = await ingest.post(sign(fresh("line"), "rotated-secret"), signed=False)
    assert response.status_code == 202


async def test_without_the_cache_a_revoked_token_is_refused_at_once(settings: Settings) -> None:
    async with ingest_app(msgspec.structs.replace(settings, ingest_config_cache_s=0)) as app:
        token_id, token = await credentials.create_token(app.db, PROJECT, "api")
        assert (await app.post(sign(fresh("api"), token), signed=False)).status_code == 202
        assert await credentials.revoke_token(app.db, PROJECT, token_id)
        response = await app.post(sign(fresh("api"), token), signed=False)
        assert response.status_code == 401


async def test_the_ingest_span_continues_the_callers_trace_into_the_event(
    ingest: Ingest,
) -> None:
    exporter = InMemorySpanExporter()
    configure_tracing("awooop-test", [SimpleSpanProcessor(exporter)])
    caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    delivery = fresh("api")
    delivery.headers["traceparent"] = f"00-{caller_trace}-00f067aa0ba902b7-01"
    response = await ingest.post(delivery)
    run_id = uuid.UUID(response.json()["run_ids"][0])
    async with ingest.db.tenant(PROJECT) as conn:
        (created,) = await eventlog.read_stream(conn, run_stream_id(run_id))
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "ingest"]
    assert format(span.context.trace_id, "032x") == caller_trace
    assert created.metadata["traceparent"] == (
        f"00-{caller_trace}-{format(span.context.span_id, '016x')}-01"
    )
    assert span.attributes is not None and span.attributes["awooop.project_id"] == PROJECT


async def test_secrets_and_tokens_never_reach_the_logs(ingest: Ingest) -> None:
    with capture_logs() as logs:
        for channel in CHANNELS:
            await ingest.post(fresh(channel))
            bad = fresh(channel)
            sign(bad, ingest.creds[channel] + "x")
            await ingest.post(bad, signed=False)
    text = repr(logs)
    assert any(e["event"] == "ingest_refused" for e in logs)
    for value in [*SECRETS.values(), *ingest.creds.values()]:
        assert value not in text


@pytest.mark.connections(15)
async def test_concurrent_deliveries_share_statements_and_keep_their_own_answers_and_traces(
    ingest: Ingest,
) -> None:
    # Group commit: deliveries that arrive while a statement runs go together in the next one.
    batches_before = metric("awooop_ingest_batch_deliveries_count")
    deliveries = [fresh("api") for _ in range(40)]
    traces = [uuid.uuid4().hex for _ in deliveries]
    for delivery, trace_id in zip(deliveries, traces, strict=True):
        delivery.headers["traceparent"] = f"00-{trace_id}-00f067aa0ba902b7-01"
    repeat = deliveries[0]  # the same key twice at once: one run, one 202 and one 200
    responses = await asyncio.gather(*(ingest.post(d) for d in [*deliveries, repeat]))
    batches = metric("awooop_ingest_batch_deliveries_count") - batches_before
    assert 1 <= batches < len(responses), batches  # some statements carried several

    assert sorted(r.status_code for r in responses) == [200] + [202] * len(deliveries)
    first, again = responses[0].json(), responses[-1].json()
    assert again["run_id"] == first["run_ids"][0]
    async with ingest.db.tenant(PROJECT) as conn:
        for delivery, trace_id, response in zip(deliveries, traces, responses[:-1], strict=True):
            (run_id,) = response.json()["run_ids"]
            (created,) = await eventlog.read_stream(conn, run_stream_id(uuid.UUID(run_id)))
            run_created = decode_event(created.data)
            assert isinstance(run_created, RunCreated)
            assert run_created.provider_event_id == delivery.ids()[0]
            assert created.metadata["traceparent"].split("-")[1] == trace_id
