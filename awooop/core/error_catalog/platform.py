"""Errors of the platform: configuration, migrations, the database and Redis, tenant bindings,
the background loops, data Postgres cannot store, the streams."""

from __future__ import annotations

from awooop.core.error_catalog.base import AwoooPError

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
    """A migration file (or a step of an online one) could not take its locks within
    lock_timeout, however often it was retried: a long transaction holds them. What completed
    stays done; running `awooop migrate` again continues from the file or step that failed."""

    code = "E-MIGRATE-006"


class MigrationsNotFoundError(AwoooPError):
    """The migration files that belong to this installation are missing (a checkout's
    migrations/ folder, an installed package's awooop/migrations): install the package again
    from its wheel, or run from a complete checkout."""

    code = "E-MIGRATE-007"


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


# --- data Postgres cannot store --------------------------------------------------------------


class UnstorableValueError(AwoooPError):
    """The value cannot be stored: Postgres refuses it (text holding \\u0000 or a lone surrogate,
    a value that breaks a constraint). Only the item that carried it fails."""

    code = "E-DATA-001"
    http_status = 422


class StepResultTooLargeError(AwoooPError):
    """A step's result is larger than AWOOOP_STEP_RESULT_MAX_BYTES allows (as JSON); nothing was
    recorded. Keep large values elsewhere and journal a reference to them."""

    code = "E-DATA-002"
    http_status = 422


class StatementRefusedError(AwoooPError):
    """Postgres refused the statement that changes this item (a constraint, a trigger, a value
    it cannot store); only this item was not changed (a bulk operation's per-run error)."""

    code = "E-DB"


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
