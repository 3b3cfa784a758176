"""The rows of ``/openapi.json`` for a project's settings (:mod:`awooop.http.openapi_operations`
says what a row says): pauses, concurrency limits, the fair share, handler versions, schedules,
model-call flow control and contract revisions."""

from __future__ import annotations

from typing import Any

from awooop.core.errors import (
    ConcurrencyLimitNotFoundError,
    HandlerVersionError,
    LimitNotFoundError,
    NoActiveRevisionError,
    NothingToRollBackError,
    PauseNotFoundError,
    PriceNotFoundError,
    RevisionConflictError,
    RevisionContractMismatchError,
    RevisionNotFoundError,
    ScheduleCronError,
    ScheduleLimitError,
    ScheduleNotFoundError,
    SchedulePolicyError,
    ScheduleTimezoneError,
    VersionRequirementNotFoundError,
)
from awooop.http import contracts, limits, llm_flow, pauses, schedules, shares
from awooop.http import versions as version_routes
from awooop.http.openapi_operations import HISTORY, PROJECT, Access, Op, Param, between
from awooop.llm import flow_store
from awooop.revisions.records import Activation, Revision
from awooop.runs import fairness, versions

CONTRACT = contracts.CONTRACT
SCHEDULE = schedules.ONE
PAUSES = (
    Op(
        "POST",
        PROJECT + "/pause",
        "pause",
        "Pause the project, or one of its channels or contracts",
        Access.MANAGE,
        body=pauses.ScopeBody,
    ),
    Op(
        "POST",
        PROJECT + "/resume",
        "resume",
        "End the pause of that scope",
        Access.MANAGE,
        body=pauses.ScopeBody,
        errors=(PauseNotFoundError,),
    ),
    Op(
        "GET",
        PROJECT + "/pauses",
        "listPauses",
        "The project's active pauses",
        Access.READ,
        query=(HISTORY,),
    ),
)
LIMITS = (
    Op(
        "POST",
        limits.PREFIX,
        "setConcurrencyLimit",
        "Make or replace a channel's or contract's concurrency limit",
        Access.MANAGE,
        body=limits.ConcurrencyLimitBody,
    ),
    Op(
        "POST",
        limits.PREFIX + "/remove",
        "removeConcurrencyLimit",
        "Drop a concurrency limit",
        Access.MANAGE,
        body=limits.ConcurrencyLimitBody,
        errors=(ConcurrencyLimitNotFoundError,),
    ),
    Op(
        "GET",
        limits.PREFIX,
        "listConcurrencyLimits",
        "The project's limits and its busiest keys",
        Access.READ,
        query=(Param("top", "how many keys (default 20)", between(1, limits.MAX_TOP)),),
    ),
)
SHARES = (
    Op(
        "GET",
        shares.PATH,
        "getShare",
        "The project's weight in the fair share",
        Access.READ,
        answer=fairness.Share,
    ),
    Op(
        "PUT",
        shares.PATH,
        "setShare",
        "Set the project's weight (an admin token only)",
        Access.ADMIN,
        body=shares.ShareBody,
        answer=fairness.Share,
    ),
)
VERSIONS = (
    Op(
        "GET",
        version_routes.PREFIX,
        "listHandlerVersions",
        "The contracts that require handler versions",
        Access.READ,
        answer=list[versions.Requirement],
    ),
    Op(
        "PUT",
        version_routes.CONTRACT,
        "requireHandlerVersions",
        "The handler versions a contract's runs accept",
        Access.MANAGE,
        body=version_routes.VersionsBody,
        answer=versions.Requirement,
        errors=(HandlerVersionError,),
    ),
    Op(
        "DELETE",
        version_routes.CONTRACT,
        "dropHandlerVersions",
        "Drop a contract's version requirement",
        Access.MANAGE,
        answer=versions.Requirement,
        errors=(VersionRequirementNotFoundError,),
    ),
)
SCHEDULE_ERRORS = (ScheduleCronError, ScheduleTimezoneError, SchedulePolicyError)
SCHEDULES = (
    Op(
        "GET",
        schedules.PREFIX,
        "listSchedules",
        "The project's schedules",
        Access.READ,
        answer=list[dict[str, Any]],
    ),
    Op(
        "POST",
        schedules.PREFIX,
        "createSchedule",
        "A schedule that starts runs of a contract",
        Access.MANAGE,
        body=schedules.ScheduleBody,
        ok={201: "the schedule as stored"},
        errors=(*SCHEDULE_ERRORS, ScheduleLimitError),
    ),
    Op(
        "GET",
        SCHEDULE,
        "getSchedule",
        "A schedule and its next fire times",
        Access.READ,
        errors=(ScheduleNotFoundError,),
    ),
    Op(
        "PATCH",
        SCHEDULE,
        "updateSchedule",
        "Change a schedule in place",
        Access.MANAGE,
        body=schedules.ScheduleChanges,
        errors=(*SCHEDULE_ERRORS, ScheduleNotFoundError),
    ),
    Op(
        "DELETE",
        SCHEDULE,
        "deleteSchedule",
        "Drop a schedule (its runs stay)",
        Access.MANAGE,
        errors=(ScheduleNotFoundError,),
    ),
    Op(
        "POST",
        SCHEDULE + "/pause",
        "pauseSchedule",
        "The schedule fires nothing until resumed",
        Access.MANAGE,
        errors=(ScheduleNotFoundError,),
    ),
    Op(
        "POST",
        SCHEDULE + "/resume",
        "resumeSchedule",
        "The schedule fires again",
        Access.MANAGE,
        errors=(ScheduleNotFoundError,),
    ),
)


def camel(word: str) -> str:
    return "".join(part.capitalize() for part in word.split())


def flow_rows(rows: llm_flow.Rows) -> tuple[Op, ...]:
    """The three routes of one kind of flow-control row (:data:`awooop.http.llm_flow.TABLE`)."""
    kind, name = rows.kind, camel(rows.kind.word)
    path = f"{llm_flow.PREFIX}/{kind.slug}"
    model = Param("model", f"the model whose {kind.word} ends", required=kind.per_model)
    priced = (PriceNotFoundError,) if kind is flow_store.BUDGETS else ()
    return (
        Op(
            "POST",
            path,
            f"set{name}",
            f"Set the project's {kind.word} (the one in force stays as history)",
            Access.MANAGE,
            body=rows.body,
            errors=priced,
        ),
        Op(
            "DELETE",
            path,
            f"end{name}",
            f"End the {kind.word} in force",
            Access.MANAGE,
            errors=(LimitNotFoundError,),
            query=(model,),
        ),
        Op(
            "GET",
            path + "s",
            f"list{name}s",
            f"The {kind.word}s in force",
            Access.READ,
            query=(HISTORY,),
        ),
    )


FLOW = tuple(op for rows in llm_flow.TABLE for op in flow_rows(rows))
CONTRACTS = (
    Op(
        "GET",
        contracts.PREFIX,
        "listContracts",
        "The project's contracts and their active revisions",
        Access.READ,
    ),
    Op(
        "GET",
        CONTRACT,
        "getContract",
        "A contract: its active revision and every revision",
        Access.READ,
    ),
    Op(
        "POST",
        CONTRACT + "/revisions",
        "createRevision",
        "A new revision of a contract",
        Access.MANAGE,
        body=contracts.CreateRequest,
        answer=Revision,
        ok={201: "the revision"},
        errors=(RevisionContractMismatchError,),
    ),
    Op(
        "GET",
        CONTRACT + "/revisions/{revision_id}",
        "getRevision",
        "A revision with its body",
        Access.READ,
        answer=Revision,
        errors=(RevisionNotFoundError,),
    ),
    Op(
        "POST",
        CONTRACT + "/activate",
        "activateRevision",
        "Activate a revision (optimistic `expected_revision_id`)",
        Access.MANAGE,
        body=contracts.ActivateRequest,
        answer=Activation,
        errors=(RevisionNotFoundError, RevisionConflictError),
    ),
    Op(
        "POST",
        CONTRACT + "/rollback",
        "rollbackRevision",
        "Activate an earlier revision again",
        Access.MANAGE,
        body=contracts.RollbackRequest,
        answer=Activation,
        errors=(
            RevisionNotFoundError,
            RevisionConflictError,
            NoActiveRevisionError,
            NothingToRollBackError,
        ),
    ),
)
