"""The revision service: create, activate, roll back and read, each ONE tenant transaction.

What the CLI and the HTTP handlers call. Each operation runs the connection-level function
(:mod:`awooop.revisions.writes`, :mod:`awooop.revisions.reads`) in its own tenant transaction
(:meth:`awooop.core.db.Database.in_tenant`), retried whole on the races written down in
:mod:`awooop.revisions.writes`: serialisation and deadlocks, the revision stream's version
(E-EVENT-001: the retry re-runs the checks) and two first activations of one contract.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from awooop.core.db import Connection, Database
from awooop.core.errors import RevisionConflictError, VersionConflictError
from awooop.core.retries import RETRYABLE_PG_ERRORS
from awooop.core.telemetry import tracer
from awooop.revisions.body import check_names, validate_body
from awooop.revisions.reads import get_active, get_revision, list_contracts, list_revisions
from awooop.revisions.records import ANY, Activation, ContractSummary, Expected, Revision
from awooop.revisions.writes import (
    FaultHook,
    LostFirstActivationRace,
    activate_revision,
    create_revision,
    previous_revision,
)

T = TypeVar("T")

RETRYABLE: tuple[type[BaseException], ...] = (
    *RETRYABLE_PG_ERRORS,
    VersionConflictError,
    LostFirstActivationRace,
)


class Revisions:
    """What the CLI and the HTTP handlers call (thin wrappers stay thin)."""

    def __init__(self, db: Database, attempts: int = 8) -> None:
        self.db = db
        self.attempts = attempts

    async def _in_tenant(self, project_id: str, fn: Callable[[Connection], Awaitable[T]]) -> T:
        try:
            return await self.db.in_tenant(project_id, fn, self.attempts, retry_on=RETRYABLE)
        except LostFirstActivationRace as exc:  # lost on every attempt
            raise RevisionConflictError(actual="(changed concurrently)") from exc

    async def create(
        self, project_id: str, family: str, contract_id: str, body: Any, actor: str = "system"
    ) -> Revision:
        check_names(project_id, family, contract_id)
        validate_body(project_id, family, contract_id, body)
        with tracer.start_as_current_span(
            "revision.create", attributes={"awooop.project_id": project_id}
        ):
            revision: Revision = await self._in_tenant(
                project_id,
                lambda conn: create_revision(
                    conn, project_id, family, contract_id, body, {"actor": actor}
                ),
            )
        return revision

    async def activate(
        self,
        project_id: str,
        family: str,
        contract_id: str,
        revision_id: uuid.UUID,
        *,
        expected: Expected = ANY,
        actor: str = "system",
        fault: FaultHook | None = None,
    ) -> Activation:
        check_names(project_id, family, contract_id)
        with tracer.start_as_current_span(
            "revision.activate",
            attributes={
                "awooop.project_id": project_id,
                "awooop.contract": f"{family}/{contract_id}",
                "awooop.revision_id": str(revision_id),
            },
        ):
            activation: Activation = await self._in_tenant(
                project_id,
                lambda conn: activate_revision(
                    conn,
                    project_id,
                    family,
                    contract_id,
                    revision_id,
                    expected=expected,
                    actor=actor,
                    metadata={"actor": actor},
                    fault=fault,
                ),
            )
        return activation

    async def rollback(
        self,
        project_id: str,
        family: str,
        contract_id: str,
        *,
        to_revision_id: uuid.UUID | None = None,
        expected: Expected = ANY,
        actor: str = "system",
    ) -> Activation:
        """Activate an earlier revision: ``to_revision_id``, else the one active before now.

        Without an explicit target the revision that was current when the previous revision
        was read is the expected one, so a concurrent activation makes this E-REVISION-002
        rather than rolling back something the caller never saw."""
        check_names(project_id, family, contract_id)

        async def once(conn: Connection) -> Activation:
            target, check = to_revision_id, expected
            if target is None:
                current, target = await previous_revision(conn, project_id, family, contract_id)
                check = current if expected is ANY else expected
            return await activate_revision(
                conn,
                project_id,
                family,
                contract_id,
                target,
                expected=check,
                actor=actor,
                metadata={"actor": actor, "rollback": True},
            )

        with tracer.start_as_current_span(
            "revision.rollback", attributes={"awooop.project_id": project_id}
        ):
            activation: Activation = await self._in_tenant(project_id, once)
        return activation

    async def get(self, project_id: str, revision_id: uuid.UUID) -> Revision:
        revision: Revision = await self._in_tenant(
            project_id, lambda conn: get_revision(conn, revision_id)
        )
        return revision

    async def active(self, project_id: str, family: str, contract_id: str) -> Revision:
        check_names(project_id, family, contract_id)
        revision: Revision = await self._in_tenant(
            project_id, lambda conn: get_active(conn, project_id, family, contract_id)
        )
        return revision

    async def revisions(
        self, project_id: str, family: str | None = None, contract_id: str | None = None
    ) -> list[Revision]:
        revisions: list[Revision] = await self._in_tenant(
            project_id, lambda conn: list_revisions(conn, project_id, family, contract_id)
        )
        return revisions

    async def contracts(self, project_id: str) -> list[ContractSummary]:
        summaries: list[ContractSummary] = await self._in_tenant(
            project_id, lambda conn: list_contracts(conn, project_id)
        )
        return summaries
