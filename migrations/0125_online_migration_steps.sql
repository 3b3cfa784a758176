-- phase: expand
-- What `awooop migrate` remembers of an online migration it has not finished (a file marked
-- `-- awooop: online` in its opening comments, run as short steps rather than one transaction:
-- awooop/core/online_plan.py). One row per completed step, with the checksum of its statement;
-- a migrator interrupted mid-way skips those steps when it runs again. The rows of a migration
-- are deleted in the transaction that records it in awooop_schema_migrations.
-- A new, empty table: no lock on anything else.
CREATE TABLE awooop_online_migration_steps (
    migration  text NOT NULL,
    step       integer NOT NULL CHECK (step >= 1),
    checksum   text NOT NULL,
    rows       bigint NOT NULL DEFAULT 0,
    done_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (migration, step)
);
REVOKE ALL ON awooop_online_migration_steps FROM PUBLIC;
GRANT SELECT ON awooop_online_migration_steps TO awooop_platform;
