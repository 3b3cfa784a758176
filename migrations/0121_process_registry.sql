-- phase: expand
--
-- The fleet's processes, by release. Every long-running process (serve, worker, relay,
-- projector, loops, up) writes its row when it starts on a schema it can run on, refreshes
-- seen_at while it runs and deletes the row when it stops (awooop/core/processes.py). `awooop
-- migrate` reads the rows seen recently: a contract migration that raises the schema floor
-- above a live process's release is held back, and `awooop migrate --check` names the
-- processes it would stop. Rows of a process that died are ignored once stale and pruned.
-- A new table and its grants: nothing else is locked, and the previous release never reads it.
CREATE TABLE awooop_processes (
    instance    text PRIMARY KEY CHECK (length(instance) BETWEEN 1 AND 200),
    kind        text NOT NULL CHECK (length(kind) BETWEEN 1 AND 40),
    host        text NOT NULL CHECK (length(host) <= 255),
    pid         integer NOT NULL,
    release     text NOT NULL CHECK (length(release) BETWEEN 1 AND 200),
    started_at  timestamptz NOT NULL DEFAULT now(),
    seen_at     timestamptz NOT NULL DEFAULT now()
);
GRANT SELECT, INSERT, UPDATE, DELETE ON awooop_processes TO awooop_platform;
