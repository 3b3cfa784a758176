"""Errors of contract revisions and the model gateway."""

from __future__ import annotations

from awooop.core.error_catalog.base import AwoooPError

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
