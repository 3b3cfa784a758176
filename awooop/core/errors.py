"""The error catalog: one exception class per error code.

Each class's docstring is its default message; HTTP handlers and the CLI map an error the same
way (``code``, ``http_status``, message). Add new codes here, never inline in callers.
"""

from __future__ import annotations

from typing import ClassVar


class AwoooPError(Exception):
    """AwoooP runtime error."""

    code: ClassVar[str] = "E-INTERNAL-001"
    http_status: ClassVar[int] = 500
    retryable: ClassVar[bool] = False
    # Seconds a client should wait before trying again (HTTP ``Retry-After``); None: no hint.
    retry_after_s: ClassVar[int | None] = None

    def __init__(self, message: str | None = None, **details: object) -> None:
        self.message = message or (self.__doc__ or self.code).strip()
        self.details = details
        super().__init__(self.message)

    def to_dict(self) -> dict[str, object]:
        body: dict[str, object] = {"code": self.code, "message": self.message}
        if self.details:
            body["details"] = {k: str(v) for k, v in self.details.items()}
        return body


# --- configuration and migrations -------------------------------------------------------------


class ConfigError(AwoooPError):
    """Invalid configuration."""

    code = "E-CONFIG-001"


class MigrationChecksumError(AwoooPError):
    """An applied migration file was changed after it was applied; refusing to run."""

    code = "E-MIGRATE-001"


class MigrationPrivilegeError(AwoooPError):
    """The login role may not change the schema: run migrations as the tables' owner or a
    superuser; the runtime's processes need only membership in awooop_app and awooop_platform."""

    code = "E-MIGRATE-002"


class SchemaMismatchError(AwoooPError):
    """The database's schema is not one this release runs on: a migration of this release is
    not applied, or was applied as a version no release shipped. Run this release's
    `awooop migrate` first; `awooop doctor` lists what differs."""

    code = "E-MIGRATE-003"


class MigrationPhaseError(AwoooPError):
    """A migration file's phase header is missing or wrong, or a contract migration would stop
    processes of an older release that are still running: roll them to this release first
    (`awooop migrate --check` names them)."""

    code = "E-MIGRATE-004"
class OnlineMigrationBlockedError(AwoooPError):
    """A step of an online migration could not take its locks within lock_timeout, however
    often it was retried: a long transaction holds them. What completed stays done; running
    `awooop migrate` again continues from the step that failed."""

    code = "E-MIGRATE-006"


class DatabaseUnavailableError(AwoooPError):
    """The database cannot be reached."""

    code = "E-DB-001"
    http_status = 503
    retryable = True
    retry_after_s = 1


class DatabaseRefusedError(DatabaseUnavailableError):
    """The database refuses this work for now (read-only, a missing privilege, disk full or out
    of resources); nothing was written: try again later."""

    code = "E-DB-002"
    retry_after_s = 5


class DatabaseBusyError(DatabaseUnavailableError):
    """The database did not finish in time (a lock held by another transaction, or the
    statement bound); nothing is left running: try again later."""

    code = "E-DB-003"
    retry_after_s = 2


class RedisUnavailableError(AwoooPError):
    """Redis cannot be reached."""

    code = "E-REDIS-001"
    http_status = 503
    retryable = True


# --- event log ------------------------------------------------------------------------------


class VersionConflictError(AwoooPError):
    """The event stream is not at the expected version (a concurrent writer appended first)."""

    code = "E-EVENT-001"
    http_status = 409


class StreamOrderConflictError(AwoooPError):
    """This transaction started before the stream's last writer committed; retry it."""

    code = "E-EVENT-002"
    http_status = 409
    retryable = True


class UnknownEventTypeError(AwoooPError):
    """The event type is not known to this version of the runtime."""

    code = "E-EVENT-003"


class StreamNotOfProjectError(AwoooPError):
    """The stream name is not one of this project's: run-<run id>, domain/<project>/<name> or
    revision-<project>/<family>/<contract> (migrations/0115_stream_names.sql). Nothing was
    written."""

    code = "E-EVENT-004"
    http_status = 403


# --- runs -----------------------------------------------------------------------------------


class IllegalTransitionError(AwoooPError):
    """This event is not allowed in the run's current state."""

    code = "E-RUN-001"
    http_status = 409


class LeaseLostError(AwoooPError):
    """The attempt no longer holds the run's lease; the write was fenced off."""

    code = "E-RUN-002"
    http_status = 409


class RunNotFoundError(AwoooPError):
    """No such run."""

    code = "E-RUN-003"
    http_status = 404


class OperationNotFoundError(AwoooPError):
    """No such operation."""

    code = "E-OPERATION-001"
    http_status = 404


# --- ingest ---------------------------------------------------------------------------------


class DuplicateEvent(AwoooPError):
    """This event was already received; the existing run is returned."""

    code = "E-IDEMPOTENT-001"
    http_status = 200


class InvalidInputError(AwoooPError):
    """The request is malformed."""

    code = "E-INPUT-001"
    http_status = 400


class MissingEventIdError(AwoooPError):
    """The request carries no provider event id to deduplicate on."""

    code = "E-INPUT-002"
    http_status = 422


class PayloadTooLargeError(AwoooPError):
    """The request body is larger than the configured limit."""

    code = "E-INPUT-003"
    http_status = 413


class UnknownChannelError(AwoooPError):
    """Unknown channel type; expected one of telegram, alertmanager, gitea, line, api."""

    code = "E-CHANNEL-001"
    http_status = 404


class AuthenticationError(AwoooPError):
    """Authentication failed."""

    code = "E-AUTH-001"
    http_status = 401


class ForbiddenError(AwoooPError):
    """The credential is valid but does not allow this action."""

    code = "E-AUTH-002"
    http_status = 403


class ProjectForbiddenError(ForbiddenError):
    """The management token belongs to another project (only an admin token acts on every
    project)."""

    code = "E-AUTH-002"


class ScopeForbiddenError(ForbiddenError):
    """The token's scope does not allow management (an ingest token only submits events)."""

    code = "E-AUTH-003"


class ReadOnlyError(ForbiddenError):
    """A read token sees runs and contracts and changes nothing (awooop tokens create PROJECT
    --scope manage for a token that may act)."""

    code = "E-AUTH-004"


class CsrfError(ForbiddenError):
    """The console form's CSRF token is missing or does not match the session: reload the page
    and submit again."""

    code = "E-AUTH-005"


# --- approvals ------------------------------------------------------------------------------


class ApprovalTokenInvalidError(AwoooPError):
    """The approval token is not valid for this run."""

    code = "E-APPROVAL-001"
    http_status = 403


class ApprovalExpiredError(AwoooPError):
    """The approval token expired before a decision was made."""

    code = "E-APPROVAL-002"
    http_status = 410


class ApprovalTokenUsedError(AwoooPError):
    """The approval token was already used."""

    code = "E-APPROVAL-003"
    http_status = 409


# --- revisions ------------------------------------------------------------------------------


class RevisionNotFoundError(AwoooPError):
    """No such contract revision in this project."""

    code = "E-REVISION-001"
    http_status = 404


class RevisionConflictError(AwoooPError):
    """The active revision is not the expected one (a concurrent activation won)."""

    code = "E-REVISION-002"
    http_status = 409


class NoActiveRevisionError(AwoooPError):
    """The contract has no active revision."""

    code = "E-REVISION-003"
    http_status = 404


# --- the HTTP edge (awooop.http.server): answered before the application sees the request ----


class MalformedRequestError(AwoooPError):
    """The request is not valid HTTP/1.1; the connection is closed."""

    code = "E-HTTP-400"
    http_status = 400


class RequestTimeoutError(AwoooPError):
    """The request did not arrive in time (AWOOOP_HTTP_HEADER_TIMEOUT_S /
    AWOOOP_HTTP_BODY_TIMEOUT_S); the connection is closed."""

    code = "E-HTTP-408"
    http_status = 408


class HeadTooLargeError(AwoooPError):
    """The request line and headers are larger than the server accepts; the connection is
    closed."""

    code = "E-HTTP-431"
    http_status = 431


class TenantShareExceededError(AwoooPError):
    """This project already has as many management and console requests in progress as it may
    (AWOOOP_HTTP_TENANT_REQUESTS): try again in a moment."""

    code = "E-HTTP-429"
    http_status = 429
    retryable = True
    retry_after_s = 1


# --- ingest: producer library ---------------------------------------------------------------


class ProducerTransactionError(AwoooPError):
    """The producer needs the caller's connection inside an open transaction whose
    awooop.project_id is the event's project (see awooop.producer.set_tenant)."""

    code = "E-INGEST-001"


class DedupeRaceError(AwoooPError):
    """The event's earlier delivery is not visible to this transaction (an isolation level
    above READ COMMITTED?); retry the transaction."""

    code = "E-INGEST-002"
    http_status = 409
    retryable = True


class TenantNotGrantedError(AwoooPError):
    """This database login is not bound to the project: a producer's login writes only the
    projects granted to it (awooop tenants grant ROLE PROJECT). Nothing was written."""

    code = "E-INGEST-003"
    http_status = 403


def check_transaction_tenant(project_id: str, tenant: str | None, bound: bool) -> None:
    """Pure: refuse a write for ``project_id`` in a transaction whose ``awooop.project_id``
    setting is ``tenant`` (None or empty: not set), by a login the binding allows (``bound``:
    ``awooop_tenant_bound``, migrations/0090) or not."""
    if tenant != project_id:
        raise ProducerTransactionError(
            f"the transaction's awooop.project_id is {tenant or None!r}, not {project_id!r}: "
            "call set_tenant(conn, project_id) first"
        )
    if not bound:
        raise TenantNotGrantedError(
            f"this database login is not bound to project {project_id!r}: "
            f"awooop tenants grant ROLE {project_id} (run by the tables' owner)"
        )


class StaleDeliveryError(AwoooPError):
    """The delivery is authentic but older than the channel accepts (the provider signed a
    time further back than the channel's bound: a late redelivery or a captured request sent
    again); nothing was written."""

    code = "E-INGEST-004"
    http_status = 403


# --- tenant bindings (awooop tenants) -----------------------------------------------------------


class TenantAdminError(AwoooPError):
    """Binding logins to projects needs the tables' owner (the role that runs awooop migrate):
    it grants the role awooop_producer and writes awooop_tenant_grants."""

    code = "E-TENANT-001"


# --- background loops ---------------------------------------------------------------------------


class UnknownLoopError(AwoooPError):
    """No loop of that name (see `awooop loops list`)."""

    code = "E-LOOP-001"
    http_status = 404


# --- workers, leases and approvals (worker runtime) ------------------------------------------


class MaxAttemptsExceededError(AwoooPError):
    """Max retry attempts exceeded"""

    code = "E-RUN-004"
    http_status = 409


class DeliveryLimitError(AwoooPError):
    """The run's work message was delivered too often; the run was dead-lettered."""

    code = "E-RUN-005"
    http_status = 409


class ApprovalRejectedError(AwoooPError):
    """The approval was rejected."""

    code = "E-APPROVAL-004"
    http_status = 409


class HandlerError(AwoooPError):
    """The run handler raised an exception."""

    code = "E-HANDLER-001"
    http_status = 500


class HandlerNotFoundError(AwoooPError):
    """The handler must name an async function as package.module:function."""

    code = "E-HANDLER-002"


class DuplicateStepError(AwoooPError):
    """A step name may be used once per run; this one was used twice."""

    code = "E-HANDLER-003"


# --- data Postgres cannot store --------------------------------------------------------------


class UnstorableValueError(AwoooPError):
    """The value cannot be stored: Postgres refuses it (text holding \\u0000 or a lone surrogate,
    a value that breaks a constraint). Only the item that carried it fails."""

    code = "E-DATA-001"
    http_status = 422


# --- streams --------------------------------------------------------------------------------


class StreamRebuildInterruptedError(AwoooPError):
    """Redis lost a shard's data again while the relay rebuilt or published it; retrying."""

    code = "E-STREAM-001"
    http_status = 503


class LeadershipLostError(AwoooPError):
    """This process is no longer the leader: its lease ran out or another holder took it."""

    code = "E-LEADER-001"
    http_status = 503
    retryable = True


# --- projections and replay ------------------------------------------------------------------


class UnknownProjectionError(AwoooPError):
    """Unknown projection."""

    code = "E-PROJECTION-001"
    http_status = 404


class ProjectionStreamError(AwoooPError):
    """A followed event stream does not continue where the projection's view stands (an
    undeclared event type or a version that does not follow); nothing was applied."""

    code = "E-PROJECTION-002"


class ReplayBusyError(AwoooPError):
    """Another replay of this projection is running; try again when it has finished."""

    code = "E-REPLAY-001"
    http_status = 409


class SwapUnsupportedError(AwoooPError):
    """The live table has a dependency the swap cannot carry over; nothing was changed."""

    code = "E-REPLAY-002"


class ReplayPrivilegeError(AwoooPError):
    """Replay builds shadow tables next to the live ones: log in as the tables' owner (the role
    that ran `awooop migrate`) or a superuser; nothing was changed."""

    code = "E-REPLAY-004"


class SwapLockTimeoutError(AwoooPError):
    """The swap could not take its short table lock (writers held it); nothing was changed."""

    code = "E-REPLAY-003"
    retryable = True


class ArchivedHeadError(AwoooPError):
    """A stream's first events are archived and this projection cannot start from a
    snapshot: replay it with ``--from-archive DIR``; nothing was changed."""

    code = "E-REPLAY-005"


# --- the partitioned log and its archive ------------------------------------------------------


class ArchiveFileError(AwoooPError):
    """An archive file is missing, does not match its checksum, or is not a complete archive of
    its partition; nothing was read from it."""

    code = "E-ARCHIVE-001"


class ArchiveRefusedError(AwoooPError):
    """A partition cannot be archived now (live runs, a follower behind it, a stream whose
    versions do not follow its snapshot); nothing was changed."""

    code = "E-ARCHIVE-002"
    retryable = True


# --- revisions and the model gateway (revisions area) ---------------------------------------


class RevisionContractMismatchError(AwoooPError):
    """The revision belongs to another contract of this project."""

    code = "E-REVISION-004"
    http_status = 422


class NothingToRollBackError(AwoooPError):
    """There is no earlier revision to roll back to."""

    code = "E-REVISION-005"
    http_status = 409


class InvalidContractBodyError(AwoooPError):
    """The contract body is not valid for its family."""

    code = "E-REVISION-006"
    http_status = 422


class ModelUnavailableError(AwoooPError):
    """The model server cannot be reached or did not answer in time."""

    code = "E-LLM-001"
    http_status = 503
    retryable = True


class ModelResponseError(AwoooPError):
    """The model server answered with an error or a malformed response."""

    code = "E-LLM-002"
    http_status = 502
