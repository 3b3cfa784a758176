"""The model gateway of a worker: pointer check, then the model call (R-24, R-25).

``complete(project_id, prompt, contract=(family, contract_id), **options)``:
1. ``get_effective_policy`` confirms the cached policy revision against the DB pointer in one
   round trip (reloading it in the same round trip when it changed);
2. the policy routes the call: ``model`` (or ``routes[route]`` when the caller passes
   ``route=...``), ``api`` (generate or chat), ``system``; the policy's ``options`` are the
   defaults, the caller's remaining keyword arguments override them;
3. the model client answers; the result names the revision and body hash that served it.
A project without an active policy revision gets the default policy (``revision_id`` None,
the topology's or ``AWOOOP_LLM_DEFAULT_MODEL``'s model).

``call(...)`` is the same path, answering a :class:`ModelCall` (what routed the call, when it
started, how long it took, and its result or its error) instead of raising: ``run.llm``
records every call of a run from it (:mod:`awooop.llm.calls`). Its ``also`` names other
contracts confirmed in the same query (the run's ``agent`` contract, whose retry section
:meth:`ModelGateway.contract_body` serves from this cache: :mod:`awooop.worker.contract_retry`)
unless a call confirmed them within :data:`ALSO_CONFIRMED_S` (many runs of one contract in
flight: one query a second carries it, the others check their own contract alone).

``start()`` starts two loops of the loop framework: the notice reader (clears cache entries,
drops the whole cache on a stream reset, rebuilds the model client on a topology notice) and
re-validation (drops entries idle longer than their family's interval whose pointer moved,
and re-checks the topology pointer). Each gateway has its own cache and reader, so several
gateways in one process behave like several workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import msgspec
from opentelemetry.trace import Status, StatusCode

from awooop.core import metrics
from awooop.core.config import Settings
from awooop.core.logs import get_logger
from awooop.core.loops import LoopCategory, LoopContext, LoopSpec, run_loop
from awooop.core.telemetry import child_span, extract, tracer
from awooop.llm.client import ModelClient, ModelRequest, ModelResponse
from awooop.llm.models import build_client
from awooop.revisions.body import TOPOLOGY_KEY
from awooop.revisions.cache import RevisionCache
from awooop.revisions.effective import EffectivePolicy, PolicyResolver
from awooop.revisions.notices import NoticeReader
from awooop.revisions.pointer import PointerChecker
from awooop.streams.clients import StreamClients
from awooop.streams.envelope import Notice

log = get_logger(__name__)

DEFAULT_CONTRACT = ("policy_routing", "default")
READER_LOOP = "revision-notice-reader"
ALSO_CONFIRMED_S = 1.0  # an ``also`` contract confirmed this recently is not asked again
REVALIDATION_LOOP = "revision-revalidation"


class LLMResult(msgspec.Struct):
    text: str
    model: str
    revision_id: uuid.UUID | None
    body_hash: str | None
    input_tokens: int | None = None  # as the model client reported them (None: not reported)
    output_tokens: int | None = None


@dataclass(frozen=True)
class ModelCall:
    """One call through the gateway, whatever came of it: the contract asked for, the request
    the policy made of it (None when the call failed before it was routed: the pointer check),
    when it started (wall clock), how long it took, and its result or its error."""

    contract: tuple[str, str]
    started_at: datetime
    duration_s: float
    request: ModelRequest | None
    result: LLMResult | None
    error: Exception | None
    prompt: str = ""  # the caller's prompt (the request's, when the call was routed)
    try_number: int = 1  # of the call's tries under its retry policy (awooop.worker.policies)
    next_try_in_s: float | None = None  # failed: the wait before the next try (None: none)

    def unwrap(self) -> LLMResult:
        """The result, or the call's own error raised again."""
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


def build_request(
    policy: EffectivePolicy, prompt: str, options: Mapping[str, Any], default_model: str
) -> ModelRequest:
    """Pure: the model request a policy makes of a prompt (see the module doc)."""
    body = policy.body
    call_options = dict(options)
    route = call_options.pop("route", None)
    model = body.get("model") or default_model
    routes = body.get("routes")
    if route is not None and isinstance(routes, dict) and isinstance(routes.get(route), str):
        model = routes[route]
    policy_options = body.get("options")
    merged = {**(policy_options if isinstance(policy_options, dict) else {}), **call_options}
    return ModelRequest(
        model=model,
        prompt=prompt,
        api="chat" if body.get("api") == "chat" else "generate",
        system=body.get("system"),
        options=merged,
        revision_id=policy.revision_id,
        body_hash=policy.body_hash,
        retry=body.get("retry") if isinstance(body.get("retry"), dict) else None,
    )


class _ClientSlot:
    """A model client and its in-flight calls: a replaced client closes when its last call
    returns, so a topology change never cuts a call short."""

    def __init__(self, client: ModelClient, default_model: str, topology: uuid.UUID | None):
        self.client = client
        self.default_model = default_model
        self.topology_revision = topology
        self.in_flight = 0
        self.retired = False


class GatewayClients(StreamClients, Protocol):
    @property
    def settings(self) -> Settings: ...


class ModelGateway:
    def __init__(self, services: GatewayClients) -> None:
        self.services = services
        self.settings: Settings = services.settings
        self.cache = RevisionCache()
        self.pointers = PointerChecker(
            self.settings.database_url, self.settings.pointer_check_connections
        )
        self.resolver = PolicyResolver(
            self.cache,
            self.pointers,
            self.settings.policy_revalidate_s,
            self.settings.channel_event_revalidate_s,
        )
        self.reader = NoticeReader(services.redis, services.keys, self._on_notice, self._on_reset)
        self.client_instances = 0
        self._slot = self._new_slot(self.settings.llm_url, self.settings.llm_default_model, None)
        self._rebuild_lock = asyncio.Lock()
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    # --- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Apply the current model topology, then start the notice reader and re-validation."""
        if self._tasks:
            return
        self._stop.clear()
        await self.pointers.warm()
        await self._check_topology()
        interval = max(
            0.05,
            min(self.settings.policy_revalidate_s, self.settings.channel_event_revalidate_s) / 4,
        )
        specs = [
            LoopSpec(
                READER_LOOP,
                LoopCategory.PLATFORM,
                0.5,
                self._read_notices,
                iteration_s=self.reader.block_ms / 1000,  # XREAD blocks inside the body
            ),
            LoopSpec(REVALIDATION_LOOP, LoopCategory.PLATFORM, interval, self._revalidate),
        ]
        self._tasks = [asyncio.create_task(run_loop(spec, self._stop)) for spec in specs]

    async def close(self) -> None:
        self._stop.set()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        await self.pointers.close()
        await self._slot.client.aclose()

    # --- the call path ------------------------------------------------------------------

    async def get_effective_policy(
        self, project_id: str, family: str, contract_id: str
    ) -> EffectivePolicy:
        return await self.resolver.get_effective_policy(project_id, family, contract_id)

    async def contract_body(self, project_id: str, family: str, contract_id: str) -> Any:
        """The body of a contract's active revision from this gateway's cache, which notices,
        re-validation and every model call naming the contract in ``also`` keep confirmed;
        absent, read through the pointer check (one query) and kept."""
        return (await self.resolver.get_cached_policy(project_id, family, contract_id)).body

    async def complete(
        self,
        project_id: str,
        prompt: str,
        *,
        contract: tuple[str, str] = DEFAULT_CONTRACT,
        **options: Any,
    ) -> LLMResult:
        call = await self.call(project_id, prompt, contract=contract, options=options)
        return call.unwrap()

    async def call(
        self,
        project_id: str,
        prompt: str,
        *,
        contract: tuple[str, str] = DEFAULT_CONTRACT,
        options: Mapping[str, Any] | None = None,
        admit: Callable[[ModelRequest], Awaitable[None]] | None = None,
        also: Sequence[tuple[str, str]] = (),
    ) -> ModelCall:
        """:meth:`complete`, answering what happened instead of raising (an ``Exception`` of
        the pointer check, of ``admit`` or of the model is the call's ``error``; cancellation
        propagates). ``admit`` (flow control: :mod:`awooop.llm.admission`) sees the routed
        request before the model is called and may wait or refuse; the call's start and
        duration are counted from when it returns. ``also``: other contracts (family, id) of
        the project whose pointers the same query confirms for this gateway's cache."""
        family, contract_id = contract
        started_at = datetime.now(UTC)
        started = time.perf_counter()
        request: ModelRequest | None = None
        with child_span(
            "llm.complete",
            attributes={
                "awooop.project_id": project_id,
                "awooop.contract": f"{family}/{contract_id}",
            },
        ) as span:
            try:
                policy, *_ = await self.resolver.get_effective_policies(
                    project_id, [(family, contract_id), *self._unconfirmed(project_id, also)]
                )
                slot = self._slot
                request = build_request(policy, prompt, options or {}, slot.default_model)
                span.set_attribute("awooop.revision_id", str(policy.revision_id))
                span.set_attribute("gen_ai.request.model", request.model)
                if admit is not None:
                    await admit(request)
                    started_at = datetime.now(UTC)
                    started = time.perf_counter()
                response = await self._generate(slot, request)
            except Exception as exc:
                # Kept, not raised: the span says what the context manager would have said.
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
                return ModelCall(
                    contract, started_at, time.perf_counter() - started, request, None, exc, prompt
                )
        result = LLMResult(
            text=response.text,
            model=response.model,
            revision_id=policy.revision_id,
            body_hash=policy.body_hash,
            input_tokens=response.input_tokens,
            output_tokens=response.output_tokens,
        )
        return ModelCall(
            contract, started_at, time.perf_counter() - started, request, result, None, prompt
        )

    def _unconfirmed(
        self, project_id: str, also: Sequence[tuple[str, str]]
    ) -> list[tuple[str, str]]:
        """The ``also`` contracts no call confirmed within :data:`ALSO_CONFIRMED_S`."""
        now = time.time()
        return [
            c
            for c in also
            if (entry := self.cache.get((project_id, *c))) is None
            or now - entry.validated_at >= ALSO_CONFIRMED_S
        ]

    async def _generate(self, slot: _ClientSlot, request: ModelRequest) -> ModelResponse:
        """The model client's answer, counted and timed; a retired client closes after its
        last call."""
        slot.in_flight += 1
        started = time.perf_counter()
        try:
            with child_span(
                "llm.call",
                attributes={"gen_ai.request.model": request.model, "llm.api": request.api},
            ):
                response = await slot.client.generate(request)
        except Exception:
            metrics.LLM_CALLS.labels("error").inc()
            raise
        finally:
            metrics.LLM_SECONDS.observe(time.perf_counter() - started)
            slot.in_flight -= 1
            if slot.retired and slot.in_flight == 0:
                await slot.client.aclose()
        metrics.LLM_CALLS.labels("ok").inc()
        return response

    # --- model topology (R-25) ----------------------------------------------------------

    def _new_slot(self, url: str, default_model: str, topology: uuid.UUID | None) -> _ClientSlot:
        client = build_client(
            url,
            timeout_s=self.settings.llm_timeout_s,
            max_connections=self.settings.llm_max_connections,
        )
        self.client_instances += 1
        return _ClientSlot(client, default_model, topology)

    async def _check_topology(self, force: bool = False) -> None:
        """Rebuild the model client when the active topology revision is not the applied one
        (``force``: also when it is, for a notice that names the applied revision)."""
        async with self._rebuild_lock:
            topology = await self.resolver.get_effective_policy(*TOPOLOGY_KEY)
            old = self._slot
            if topology.revision_id == old.topology_revision and not force:
                return
            url = topology.body.get("url") or self.settings.llm_url
            default_model = topology.body.get("default_model") or self.settings.llm_default_model
            self._slot = self._new_slot(url, default_model, topology.revision_id)
            log.info(
                "model_client_rebuilt",
                topology_revision=str(topology.revision_id),
                url=url,
                client_instances=self.client_instances,
            )
            old.retired = True
            if old.in_flight == 0:
                await old.client.aclose()

    # --- loops --------------------------------------------------------------------------

    async def _on_notice(self, notice: Notice) -> None:
        key = (notice.project_id, notice.contract_family, notice.contract_id)
        # A child of the activation's span (its traceparent travels in the outbox row and the
        # notice), so the activation and its effect on every worker are one trace.
        with tracer.start_as_current_span(
            "revision.notice",
            context=extract(notice.traceparent),
            attributes={
                "awooop.project_id": notice.project_id,
                "awooop.contract": f"{notice.contract_family}/{notice.contract_id}",
                "awooop.revision_id": str(notice.new_revision_id),
            },
        ) as span:
            cleared = self.cache.on_notice(key, notice.new_revision_id)
            span.set_attribute("awooop.cache_cleared", cleared)
            if cleared:
                metrics.REVISION_CACHE_STALE.labels("notice").inc()
            if key == TOPOLOGY_KEY and notice.new_revision_id != self._slot.topology_revision:
                await self._recheck_topology(force=True)

    async def _on_reset(self, reason: str) -> None:
        dropped = self.cache.clear()
        log.warning("revision_cache_dropped", reason=reason, entries=dropped)
        # A topology notice may have been lost with the stream: ask the pointer now rather
        # than at the next re-validation.
        await self._recheck_topology()

    async def _recheck_topology(self, force: bool = False) -> None:
        """From the notice path: a failure (database down) must not stop the reader from
        handling the rest of its batch; re-validation retries within its interval."""
        try:
            await self._check_topology(force=force)
        except Exception:
            log.warning("model_topology_check_failed", exc_info=True)

    async def _read_notices(self, ctx: LoopContext) -> None:
        await self.reader.poll()
        ctx.wakeup.set()  # read again at once: XREAD itself blocks while there is nothing

    async def _revalidate(self, _ctx: LoopContext) -> None:
        await self.resolver.revalidate()
        await self._check_topology()
