"""Errors of projections, replay and the log's archive."""

from __future__ import annotations

from awooop.core.error_catalog.base import AwoooPError

# --- projections and replay ------------------------------------------------------------------


class UnknownProjectionError(AwoooPError):
    """Unknown projection."""

    code = "E-PROJECTION-001"
    http_status = 404


class ProjectionStreamError(AwoooPError):
    """A followed event stream does not continue where the projection's view stands (an
    undeclared event type or a version that does not follow); nothing was applied."""

    code = "E-PROJECTION-002"


class ProjectionRegistrationError(AwoooPError):
    """A registered projection cannot be loaded or does not declare what a projection must
    (see docs/consumers.md); nothing was started."""

    code = "E-PROJECTION-003"


class ProjectionTenancyError(AwoooPError):
    """A registered projection's table is not isolated per tenant: it needs a ``project_id``
    column and row-level security (``SELECT awooop_enforce_tenant_isolation('table')`` in the
    migration that creates it); nothing was started."""

    code = "E-PROJECTION-004"


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
