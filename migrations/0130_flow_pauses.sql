-- phase: expand
--
-- Pauses (flow control): an operator stops new attempts of a project, or of one of its
-- channels or contracts, and later resumes them. While a pause is active (resumed_at IS NULL)
-- intake still accepts and deduplicates submissions, running attempts finish, and no claim
-- statement takes a run of the scope: the claims test this table in the statement that locks
-- the run (awooop/eventlog/sql/_run_paused.sql), so a pause holds on every worker at once.
-- A row is never deleted: resuming sets resumed_at and resumed_by, so the table is also the
-- history of who paused what, when and why. scope_key is the channel type or the contract id
-- ('' for the whole project). At most one active pause per scope.
--
-- A new table, its indexes and its tenant isolation (row-level security, the producer
-- binding, the runtime's grants): nothing else is locked, and the previous release never
-- reads it.
CREATE TABLE awooop_flow_pauses (
    pause_id    uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id  text NOT NULL,
    scope       text NOT NULL CHECK (scope IN ('project', 'channel', 'contract')),
    scope_key   text NOT NULL DEFAULT '' CHECK (length(scope_key) <= 200),
    reason      text NOT NULL DEFAULT '' CHECK (length(reason) <= 2000),
    paused_by   text NOT NULL CHECK (length(paused_by) BETWEEN 1 AND 200),
    paused_at   timestamptz NOT NULL DEFAULT now(),
    resumed_by  text CHECK (length(resumed_by) BETWEEN 1 AND 200),
    resumed_at  timestamptz,
    CHECK ((resumed_at IS NULL) = (resumed_by IS NULL)),
    CHECK ((scope = 'project') = (scope_key = ''))
);
-- The active pauses: what every claim probes (by the run's project), one row per scope.
CREATE UNIQUE INDEX awooop_flow_pauses_active_idx
    ON awooop_flow_pauses (project_id, scope, scope_key) WHERE resumed_at IS NULL;
-- A project's history, newest first.
CREATE INDEX awooop_flow_pauses_project_idx
    ON awooop_flow_pauses (project_id, paused_at DESC);
SELECT awooop_enforce_tenant_isolation('awooop_flow_pauses');
