"""The operations ``/openapi.json`` describes (:mod:`awooop.http.openapi`): what a row says,
and the rows of the run routes (health, ingest, runs, output, approvals, signals); the rows of
a project's settings are in :mod:`awooop.http.openapi_settings`.

What the code does not say is written in the rows once, beside the names the code does: each
route's operation id and summary, who may call it (:class:`Access`), the Struct its body is
decoded into (its schema comes from msgspec, so it cannot drift from the route), the type of
its answer where the answer is exactly that type's JSON, its query parameters and headers, and
the catalog errors it answers beyond those every route of its access answers
(:func:`awooop.http.openapi.common_errors`). The methods and paths are the routes' own:
``tests/unit/test_openapi.py`` holds them equal to the app's routes, so a route added without
its row fails there.

The console (every path under :data:`EXCLUDED_PREFIX`: HTML pages, forms, scripts and the
page's output stream, over a session cookie) is no part of the API and has no row.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, NamedTuple

from awooop.core.errors import (
    ApprovalExpiredError,
    ApprovalTokenInvalidError,
    ApprovalTokenUsedError,
    AwoooPError,
    ConcurrencyDepthError,
    DuplicateEvent,
    IllegalTransitionError,
    MissingEventIdError,
    OutputStreamsExceededError,
    RunNotFoundError,
    ServerOutputStreamsExceededError,
    SignalLimitError,
    SignalRunFinishedError,
    StaleDeliveryError,
    StepResultTooLargeError,
    UnknownChannelError,
    UnstorableValueError,
)
from awooop.http import approvals, runs
from awooop.http import signals as signal_routes
from awooop.ingest import ADAPTERS, ingest_write
from awooop.ingest.credentials import PROJECT_ID
from awooop.runs import listing, output_log, signals

EXCLUDED_PREFIX = "/ui"
JSON = "application/json"
SSE = "text/event-stream"
TEXT = "text/plain"


class Access(enum.Enum):
    """Who may call a route: the bearer token's role it needs (``admin`` does everything a
    ``manage`` token does, which does everything a ``read`` token does)."""

    PUBLIC = "public"  # no token
    INGEST = "ingest"  # the channel's credentials: its bearer token, or the provider's secret
    READ = "read"
    MANAGE = "manage"
    ADMIN = "admin"


class Param(NamedTuple):
    name: str
    description: str
    schema: Mapping[str, Any] = {"type": "string"}  # shared by the rows, never changed
    required: bool = False


class Op(NamedTuple):
    method: str
    path: str
    operation_id: str
    summary: str
    access: Access
    body: Any = None  # the type the route decodes its JSON body into (None: no body)
    answer: Any = dict[str, Any]  # the success body's type (its JSON is exactly this type's)
    ok: Mapping[int, str] | None = None  # success statuses and what each means (None: 200)
    errors: tuple[type[AwoooPError], ...] = ()  # beyond common_errors(access, body)
    query: tuple[Param, ...] = ()
    headers: tuple[Param, ...] = ()
    media: tuple[str, ...] = (JSON,)
    tag: str = ""  # set by the section the row is in


def between(low: int, high: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": low, "maximum": high}


UUID = {"type": "string", "format": "uuid"}
SIGNAL_NAME = {"type": "string", "minLength": 1, "maxLength": signals.MAX_NAME_LENGTH}
PATH_PARAMS: Mapping[str, Param] = {
    p.name: p._replace(required=True)
    for p in (
        Param(
            "project_id", "the project", {"type": "string", "pattern": f"^{PROJECT_ID.pattern}$"}
        ),
        Param("channel_type", "the channel", {"type": "string", "enum": sorted(ADAPTERS)}),
        Param("run_id", "the run (another project's run is not found)", UUID),
        Param("name", "the signal's name: no control characters", SIGNAL_NAME),
        Param("family", "the contract's family"),
        Param("contract_id", "the contract"),
        Param("revision_id", "the revision", UUID),
        Param("schedule_id", "the schedule", UUID),
    )
}
HISTORY = Param("history", "`1` or `true`: the ended ones too")
IDEMPOTENCY_KEY = Param("Idempotency-Key", "the caller's key for this request, the same on retries")

PROJECT = "/v1/projects/{project_id}"
RUN = approvals.PREFIX
HEALTH = (
    Op("GET", "/healthz", "getHealth", "Liveness: the process answers", Access.PUBLIC),
    Op(
        "GET",
        "/readyz",
        "getReadiness",
        "Readiness for ingest: Postgres and the schema, Redis optional",
        Access.PUBLIC,
        ok={200: "ready (`status` ok, or degraded without Redis)", 503: "not ready: `checks`"},
    ),
    Op("GET", "/metrics", "getMetrics", "The Prometheus metrics", Access.PUBLIC, media=(TEXT,)),
    Op("GET", "/openapi.json", "getOpenApi", "This document", Access.PUBLIC),
)
INGEST = (
    Op(
        "POST",
        PROJECT + "/channels/{channel_type}",
        "ingestEvent",
        "A provider's webhook or an API event becomes runs",
        Access.INGEST,
        body=Any,
        ok={
            202: "at least one run created: `run_ids` and one of `results` per event",
            200: f"every event seen before ({DuplicateEvent.code}, the existing `run_id`), or "
            "a delivery without events",
        },
        errors=(
            UnknownChannelError,
            StaleDeliveryError,
            MissingEventIdError,
            UnstorableValueError,
            ConcurrencyDepthError,
        ),
        query=(
            Param("contract_id", f"the agent contract (default `{ingest_write.DEFAULT_CONTRACT}`)"),
        ),
        headers=(IDEMPOTENCY_KEY._replace(description="the api channel's event key"),),
    ),
)
RUNS = (
    Op(
        "GET",
        PROJECT + "/runs",
        "listRuns",
        "The project's runs, newest created first, a page at a time",
        Access.READ,
        query=(
            *(Param(key, "a filter of the run list") for key in listing.FILTER_KEYS[1:]),
            Param("limit", f"runs a page (default {listing.PAGE})", between(1, runs.MAX_PAGE)),
            Param("before", "the `next` of the previous page"),
        ),
    ),
    Op(
        "GET",
        RUN,
        "getRun",
        "A run's state and its model calls",
        Access.READ,
        errors=(RunNotFoundError,),
    ),
)
OUTPUT = (
    Op(
        "GET",
        RUN + "/output",
        "getRunOutput",
        "A run's streamed output: server-sent events, or one page of chunks as JSON",
        Access.READ,
        ok={
            200: "`text/event-stream`: events `output` (`id` = the chunk's `seq`), `abandoned`, "
            "`truncated`, `end`, `error`, each `data` one line of JSON (docs/workers.md, "
            "Streamed output); `application/json` (`?format=json` or `Accept`): one page, "
            "`{run_id, status, attempt, final, chunks, next, more}`"
        },
        errors=(RunNotFoundError, OutputStreamsExceededError, ServerOutputStreamsExceededError),
        query=(
            Param(
                "format",
                "`json`: one page; `sse` (or by `Accept`): the stream",
                {"enum": ["json", "sse"]},
            ),
            Param(
                "after",
                "the `seq` of the last chunk the caller has",
                {"type": "integer", "minimum": 0},
            ),
            Param(
                "limit",
                f"chunks a JSON page (default {output_log.PAGE_ROWS})",
                between(1, output_log.MAX_PAGE_ROWS),
            ),
        ),
        headers=(Param("Last-Event-ID", "resume the stream after this chunk's `seq`"),),
        media=(SSE, JSON),
    ),
)
DECISION_ERRORS = (
    RunNotFoundError,
    IllegalTransitionError,
    ApprovalTokenInvalidError,
    ApprovalExpiredError,
    ApprovalTokenUsedError,
    UnstorableValueError,
    StepResultTooLargeError,
)
CONTROL_ERRORS = (RunNotFoundError, IllegalTransitionError)
APPROVALS = (
    Op(
        "POST",
        RUN + "/approve",
        "approveRun",
        "Approve a run's open request",
        Access.MANAGE,
        body=approvals.DecisionBody,
        errors=DECISION_ERRORS,
    ),
    Op(
        "POST",
        RUN + "/reject",
        "rejectRun",
        "Reject a run's open request",
        Access.MANAGE,
        body=approvals.DecisionBody,
        errors=DECISION_ERRORS,
    ),
    Op(
        "POST",
        RUN + "/cancel",
        "cancelRun",
        "Cancel a run (and its children started to go with it)",
        Access.MANAGE,
        body=approvals.CancelBody,
        errors=CONTROL_ERRORS,
    ),
    Op(
        "POST",
        RUN + "/retry",
        "retryRun",
        "A failed run back to pending with more attempts",
        Access.MANAGE,
        body=approvals.RetryBody,
        errors=CONTROL_ERRORS,
    ),
)
SIGNALS = (
    Op(
        "POST",
        RUN + "/signals/{name}",
        "sendSignal",
        "Send a signal to a run, delivered at once when the run waits for it",
        Access.MANAGE,
        body=signal_routes.SignalBody,
        answer=signals.Sent,
        ok={201: "the signal, sent now", 200: "sent before with this key (`duplicate`)"},
        errors=(RunNotFoundError, SignalRunFinishedError, SignalLimitError),
        headers=(IDEMPOTENCY_KEY._replace(description="the signal's key, when the body has none"),),
    ),
)
