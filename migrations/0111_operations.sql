-- Bulk actions by filter (issue 22): one row per operation, "retry (or cancel) every run this
-- filter matches", written by awooop/runs/bulk.py.
--
-- project_id is the filter's project, or the platform project '__platform__' for an admin's
-- operation across projects (then only the platform role reads and writes it). The run
-- changes of one batch, the cursor and the counts commit in one transaction that first locks
-- this row, so a resumed or doubled executor continues where the last commit left off and
-- never changes a run twice for one operation. Every run event of the operation carries
-- operation_id and actor in its metadata (awooop_events.metadata).
CREATE TABLE awooop_operations (
    operation_id     uuid PRIMARY KEY,
    project_id       text NOT NULL,
    kind             text NOT NULL CHECK (kind IN ('retry', 'cancel')),
    filter           jsonb NOT NULL,           -- awooop.runs.listing.RunFilter, since absolute
    actor            text NOT NULL,            -- who: <scope>-token:<id> or cli:<user>
    person           text NOT NULL,            -- the name put in each event (default: actor)
    via              text NOT NULL CHECK (via IN ('console', 'cli')),
    extra_attempts   integer CHECK (extra_attempts BETWEEN 1 AND 1000),  -- retry
    reason           text NOT NULL DEFAULT '',  -- cancel
    state            text NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'done')),
    expected         integer NOT NULL,         -- the preview's count at confirmation
    cursor_at        timestamptz NOT NULL,     -- keyset: runs older than (cursor_at, cursor_id)
    cursor_id        uuid NOT NULL,            --   are left; starts at the confirmation time
    scanned          integer NOT NULL DEFAULT 0,  -- runs the filter's SQL matched
    changed          integer NOT NULL DEFAULT 0,  -- retried / cancelled
    refused          integer NOT NULL DEFAULT 0,  -- a run whose change failed (errors says why)
    skipped          integer NOT NULL DEFAULT 0,  -- no longer matching when locked
    batches          integer NOT NULL DEFAULT 0,
    errors           jsonb NOT NULL DEFAULT '[]'::jsonb,  -- the first 100 refusals
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz
);
-- The console's and the CLI's list of a project's operations, newest first.
CREATE INDEX awooop_operations_project_idx ON awooop_operations (project_id, created_at DESC);
SELECT awooop_enforce_tenant_isolation('awooop_operations');
