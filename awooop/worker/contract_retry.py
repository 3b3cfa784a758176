"""Retry policies and timeouts of steps and tool calls, overridden by the run's contract.

Handler code declares a step's or a tool call's policy (``run.step(name, fn, retry=...,
timeout=...)``, ``run.wait_for_tool(tool, call, retry=..., timeout=...)``,
:mod:`awooop.worker.policies`); an operator changes it without a release in the active
revision of the run's ``agent`` contract (the run's ``contract_id``; ``default`` for a run that
names none)::

    {"max_attempts": 3,
     "retry": {"steps": {"fetch": {"max_attempts": 4, "on": ["retryable"], "timeout_s": 10}},
               "tools": {"search": {"max_attempts": 1}}}}

An entry's retry fields replace those of the code's policy (or the default) as a model call's
policy contract does for its calls (:func:`~awooop.worker.policies.with_contract`), and its
``timeout_s`` the code's ``timeout=``; fields it leaves out keep the code's. Entries are checked
when the revision is created and again when it is activated
(:mod:`awooop.revisions.retry_section`).

An attempt takes the section once, when it first runs a step or a tool call (a replayed step
reads nothing); its later steps and calls follow the same revision, so that one attempt never
mixes two revisions' policies. A worker with a model gateway serves it from the gateway's
revision cache (:meth:`~awooop.llm.gateway.ModelGateway.contract_body`): the run's model calls
confirm the agent contract's pointer in the query that confirms their policy's (``also``; at
most once a second), so an activation applies from the next attempt to start a step after the
worker's next such confirmation, its notice or the re-validation
(``AWOOOP_POLICY_REVALIDATE_S``), whichever comes first. A worker without a gateway reads it in
one statement per attempt: an activation applies from the next attempt to run a step or tool
call after it. A section that is no longer valid (stored before its rules existed) is ignored
with a warning: the code's policies apply. Tries are journaled as the code's are
(``StepCompleted.tries``, ``try_errors``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, runtime_checkable

from awooop.core.db import Database
from awooop.core.errors import InvalidContractBodyError
from awooop.core.logs import get_logger
from awooop.core.retries import unavailable_on_store_errors
from awooop.eventlog.state import RunState
from awooop.ingest.ingest_write import DEFAULT_CONTRACT  # a run that names none: as ingest reads
from awooop.revisions.body import AGENT_FAMILY
from awooop.revisions.reads import active_field
from awooop.revisions.retry_section import check_agent_retry
from awooop.worker.policies import (
    MODEL_DEFAULT,
    STEP_DEFAULT,
    TOOL_DEFAULT,
    How,
    Retry,
    with_contract,
)

log = get_logger("awooop.worker")

SECTION: Final = "retry"

Reader = Callable[[], Awaitable[Any]]  # the raw section of the run's active agent revision
Contract = tuple[str, str]  # (family, contract id)


@runtime_checkable
class ContractBodies(Protocol):
    """A revision cache that serves a contract's active body: the model gateway's."""

    async def contract_body(self, project_id: str, family: str, contract_id: str) -> Any: ...


@dataclass(frozen=True)
class Overrides:
    """Pure: the entries of a contract's section by step and by tool name."""

    steps: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    tools: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @classmethod
    def of(cls, section: Any) -> Overrides:
        """The overrides of a section (None: none); raises E-REVISION-006 if it is invalid."""
        if section is None:
            return NONE  # one for every attempt whose contract has no section
        check_agent_retry(AGENT_FAMILY, section)
        return cls(steps=section.get("steps", {}), tools=section.get("tools", {}))


NONE: Final = Overrides()


def merged(how: How, entry: Mapping[str, Any] | None, default: Retry) -> How:
    """Pure: ``how`` (the code's ``retry=`` and ``timeout=``) with a contract entry's fields.
    A ``retry=`` that is not a :class:`Retry` is left as it is, for the step to refuse."""
    policy = how.get("retry", default)
    if not entry or not isinstance(policy, Retry):
        return how
    return {
        "retry": with_contract(policy, dict(entry)),
        "timeout": entry.get("timeout_s", how.get("timeout")),
    }


class ContractRetry:
    """The overrides of one attempt: read at its first step or tool call, then kept."""

    def __init__(self, read: Reader | None = None, also: tuple[Contract, ...] = ()) -> None:
        self._read = read
        # The contracts whose pointers the attempt's model calls confirm (the cache's).
        self.also = also
        self._overrides: Overrides | None = None if read is not None else NONE
        self._lock: asyncio.Lock | None = None  # while parallel tool calls read (once)

    @classmethod
    def fixed(cls, overrides: Overrides) -> ContractRetry:
        """Overrides known beforehand (the handler kit's), read from nowhere."""
        made = cls()
        made._overrides = overrides
        return made

    @classmethod
    def of_run(
        cls,
        db: Database,
        state: RunState,
        timeout_s: float | None,
        bodies: ContractBodies | None = None,
    ) -> ContractRetry:
        """An attempt's of ``state``'s run: its section from ``bodies`` (the gateway's cache,
        confirmed by the run's model calls) or else read from the database (each try of the
        read bounded by ``timeout_s``); Postgres away: E-DB-001, which ends the attempt."""
        project_id, contract_id = state.project_id, state.contract_id or DEFAULT_CONTRACT
        if bodies is not None:
            cache = bodies

            async def cached() -> Any:
                with unavailable_on_store_errors("reading the run's contract failed"):
                    body = await cache.contract_body(project_id, AGENT_FAMILY, contract_id)
                return body.get(SECTION) if isinstance(body, dict) else None

            return cls(cached, also=((AGENT_FAMILY, contract_id),))

        async def read() -> Any:
            with unavailable_on_store_errors("reading the run's contract failed"):
                _, section = await db.in_tenant(
                    project_id,
                    lambda conn: active_field(conn, project_id, AGENT_FAMILY, contract_id, SECTION),
                    timeout_s=timeout_s,
                )
            return section

        return cls(read)

    async def step(self, name: str, how: How) -> How:
        return merged(how, (await self._get()).steps.get(name), STEP_DEFAULT)

    async def model_step(self, name: str, options: dict[str, Any]) -> dict[str, Any]:
        """``run.llm_step``'s options with the entry of step ``name``: its retry fields and
        ``timeout_s`` become the model call's ``retry=`` and ``timeout=``."""
        entry = (await self._get()).steps.get(name)
        if not entry:
            return options
        how: How = {"retry": options.get("retry") or MODEL_DEFAULT}
        if options.get("timeout") is not None:
            how["timeout"] = options["timeout"]
        return {**options, **merged(how, entry, MODEL_DEFAULT)}

    async def tool(self, tool: str, how: How) -> How:
        return merged(how, (await self._get()).tools.get(tool), TOOL_DEFAULT)

    async def _get(self) -> Overrides:
        if self._overrides is not None:
            return self._overrides
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:  # parallel tool calls read once
            if self._overrides is None:
                assert self._read is not None
                section = await self._read()
                try:
                    self._overrides = Overrides.of(section)
                except InvalidContractBodyError as exc:
                    log.warning("contract_retry_ignored", reason=exc.message)
                    self._overrides = NONE
                # Read: the reader (its closure) and the lock are not kept for the attempt's
                # life (a waiter that took the lock already holds it).
                self._read = self._lock = None
        return self._overrides
