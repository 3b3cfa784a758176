"""Errors at the edge: ingest (HTTP and the producer library), authentication, the HTTP
server."""

from __future__ import annotations

from awooop.core.error_catalog.base import AwoooPError

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
    awooop.project_id is the event's project (see awooop.producer.transaction and
    awooop.producer.set_tenant)."""

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


class ProducerConnectionError(AwoooPError):
    """The producer cannot use this connection: its own type codecs cannot carry the
    producer's arguments (text, uuid, numbers and text arrays, as asyncpg passes them by
    default), or it is not a connection the producer takes (another driver or dialect, a sync
    connection given to the async API or the other way round). Nothing was written and the
    transaction can go on. The message names what to use: awooop.producer.create_pool(...) or
    a plain asyncpg.connect(...), psycopg 3, SQLAlchemy's postgresql+psycopg or
    postgresql+asyncpg dialects, awooop.producer.sync for sync connections."""

    code = "E-INGEST-005"


def check_transaction_tenant(project_id: str, tenant: str | None, bound: bool) -> None:
    """Pure: refuse a write for ``project_id`` in a transaction whose ``awooop.project_id``
    setting is ``tenant`` (None or empty: not set), by a login the binding allows (``bound``:
    ``awooop_tenant_bound``, migrations/0090) or not."""
    if tenant != project_id:
        raise ProducerTransactionError(
            f"the transaction's awooop.project_id is {tenant or None!r}, not {project_id!r}: "
            "open it with producer.transaction(conn, project_id), or call "
            "set_tenant(conn, project_id) in it first"
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
