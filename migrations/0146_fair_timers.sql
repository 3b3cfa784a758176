-- awooop: online
-- phase: expand
--
-- Fair timers across projects (docs/workers.md, Durable sleep): the timers loop picks each batch
-- round-robin across the projects that have due waits (run_lock_wait_due.sql), so one
-- project's 100,000 timers due at one instant hold another project's timer due at that instant
-- back for at most one batch. awooop_run_waits_project_due_idx serves each part of it: the
-- projects with timed waits (a skip scan: one probe per project), whether a project has a wait
-- due, and its earliest due waits, up to its share of the batch.
--
-- Online: the index is built CONCURRENTLY (sleeps and signals go on). The previous release does
-- not read it; its timers loop picks the earliest due waits across projects.
CREATE INDEX CONCURRENTLY awooop_run_waits_project_due_idx
    ON awooop_run_waits (project_id, due_at) WHERE due_at IS NOT NULL;
