-- phase: expand
--
-- Rate limits and token budgets of model calls (flow control, scope awooop_llm).
--
-- awooop_llm_rate_limits: a token bucket per project and model ('' = every model of the
-- project): limit_count calls per period_s seconds, at most burst at once. The row in force
-- (valid_to IS NULL) is also the bucket: tokens left at refilled_at. A worker takes a token
-- with one conditional UPDATE that computes the refill from the database clock, so the limit
-- holds across every worker and process. A change ends the row in force (valid_to, ended_by)
-- and inserts its successor: the table is the history of what was enforced when.
--
-- awooop_llm_budgets: tokens per period (period_s seconds, periods aligned on
-- 2000-01-01T00:00Z) per project and model ('' = every model), with history like the limits.
-- reserve_tokens: what a call that names no max_tokens reserves. on_exceed: 'wait' (until the
-- next period) or 'fail' (E-BUDGET-001).
--
-- awooop_llm_budget_usage: one counter row per (project, model, period_s, period start):
-- tokens settled (used) and reserved by calls in flight. Keyed by the scope and the period,
-- not by the budget row, so changing a budget keeps the period's count.
--
-- awooop_llm_reservations: one row per model call and budget it counts against, keyed by
-- (run, attempt, call sequence of the attempt, model scope). A call reserves before it starts
-- and is settled to the reported usage in the transaction that writes its ModelCalled event;
-- the reservation of an attempt that no longer holds its lease is released.
--
-- awooop_llm_waits: the run's attempt waits for a rate-limit token or a budget (blocked_on:
-- rate_limited or over_budget, the key and until when). One row per run, overwritten.
--
-- New tables, their indexes and their tenant isolation: nothing else is locked, and the
-- previous release never reads them.
CREATE TABLE awooop_llm_rate_limits (
    limit_id     uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id   text NOT NULL,
    model        text NOT NULL DEFAULT '' CHECK (length(model) <= 200),
    limit_count  integer NOT NULL CHECK (limit_count > 0),
    period_s     double precision NOT NULL CHECK (period_s > 0),
    burst        integer NOT NULL CHECK (burst > 0),
    tokens       double precision NOT NULL,
    refilled_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    granted      bigint NOT NULL DEFAULT 0,
    set_by       text NOT NULL CHECK (length(set_by) BETWEEN 1 AND 200),
    valid_from   timestamptz NOT NULL DEFAULT now(),
    valid_to     timestamptz,
    ended_by     text CHECK (length(ended_by) BETWEEN 1 AND 200),
    CHECK ((valid_to IS NULL) = (ended_by IS NULL))
);
CREATE UNIQUE INDEX awooop_llm_rate_limits_active_idx
    ON awooop_llm_rate_limits (project_id, model) WHERE valid_to IS NULL;
CREATE INDEX awooop_llm_rate_limits_project_idx
    ON awooop_llm_rate_limits (project_id, valid_from DESC);
SELECT awooop_enforce_tenant_isolation('awooop_llm_rate_limits');

CREATE TABLE awooop_llm_budgets (
    budget_id       uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id      text NOT NULL,
    model           text NOT NULL DEFAULT '' CHECK (length(model) <= 200),
    tokens          bigint NOT NULL CHECK (tokens >= 0),
    period_s        integer NOT NULL CHECK (period_s > 0),
    reserve_tokens  integer NOT NULL CHECK (reserve_tokens > 0),
    on_exceed       text NOT NULL CHECK (on_exceed IN ('wait', 'fail')),
    set_by          text NOT NULL CHECK (length(set_by) BETWEEN 1 AND 200),
    valid_from      timestamptz NOT NULL DEFAULT now(),
    valid_to        timestamptz,
    ended_by        text CHECK (length(ended_by) BETWEEN 1 AND 200),
    CHECK ((valid_to IS NULL) = (ended_by IS NULL))
);
CREATE UNIQUE INDEX awooop_llm_budgets_active_idx
    ON awooop_llm_budgets (project_id, model) WHERE valid_to IS NULL;
CREATE INDEX awooop_llm_budgets_project_idx
    ON awooop_llm_budgets (project_id, valid_from DESC);
SELECT awooop_enforce_tenant_isolation('awooop_llm_budgets');

CREATE TABLE awooop_llm_budget_usage (
    project_id    text NOT NULL,
    model         text NOT NULL,
    period_s      integer NOT NULL,
    period_start  timestamptz NOT NULL,
    used          bigint NOT NULL DEFAULT 0,
    reserved      bigint NOT NULL DEFAULT 0 CHECK (reserved >= 0),
    calls         bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (project_id, model, period_s, period_start)
);
SELECT awooop_enforce_tenant_isolation('awooop_llm_budget_usage');

CREATE TABLE awooop_llm_reservations (
    run_id        uuid NOT NULL,
    attempt       integer NOT NULL,
    seq           integer NOT NULL,
    model         text NOT NULL,
    project_id    text NOT NULL,
    period_s      integer NOT NULL,
    period_start  timestamptz NOT NULL,
    reserved      bigint NOT NULL CHECK (reserved >= 0),
    used          bigint,
    state         text NOT NULL DEFAULT 'reserved'
                  CHECK (state IN ('reserved', 'settled', 'released')),
    reserved_at   timestamptz NOT NULL DEFAULT now(),
    settled_at    timestamptz,
    PRIMARY KEY (run_id, attempt, seq, model)
);
-- The open reservations of a counter: what a refused reservation sweeps.
CREATE INDEX awooop_llm_reservations_open_idx
    ON awooop_llm_reservations (project_id, model, period_s, period_start)
    WHERE state = 'reserved';
SELECT awooop_enforce_tenant_isolation('awooop_llm_reservations');

CREATE TABLE awooop_llm_waits (
    run_id      uuid PRIMARY KEY,
    project_id  text NOT NULL,
    attempt     integer NOT NULL,
    reason      text NOT NULL CHECK (reason IN ('rate_limited', 'over_budget')),
    wait_key    text NOT NULL CHECK (length(wait_key) <= 300),
    detail      text NOT NULL DEFAULT '' CHECK (length(detail) <= 500),
    since       timestamptz NOT NULL DEFAULT now(),
    until       timestamptz NOT NULL,
    ended_at    timestamptz
);
SELECT awooop_enforce_tenant_isolation('awooop_llm_waits');
