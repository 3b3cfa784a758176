-- awooop: online
-- phase: expand
--
-- Budgets of model calls in cost as well as in tokens, and the retention of finished
-- reservations and waits (flow control, scope awooop_llm; the tables of 0133).
--
-- awooop_llm_prices: the price of a project's calls to one model, in credits (a unit the
-- project chooses, e.g. micro-dollars) per 1,000 input tokens and per 1,000 output tokens,
-- with history like the limits and budgets: a change ends the row in force (valid_to,
-- ended_by) and inserts its successor.
--
-- awooop_llm_budgets.unit: 'tokens' (the budget is `tokens` per period) or 'cost' (`cost`
-- credits per period; `tokens` is then 0). A cost budget reserves, before the call, its
-- maximum tokens at the higher of the model's two prices and settles to the reported input
-- and output tokens at their prices (rounded up to a whole credit).
--
-- awooop_llm_budget_usage.unit and awooop_llm_reservations.unit: the unit of a counter and of
-- a reservation; the counter's key gains the unit, so a scope whose budget changes unit
-- within a period starts a fresh counter instead of mixing tokens and credits.
--
-- Two indexes serve the retention of finished rows (the dedupe_expiry loop deletes, in
-- batches, reservations settled or released and waits ended longer than
-- AWOOOP_LLM_FLOW_RETENTION_S ago); they are built CONCURRENTLY: calls go on meanwhile.
--
-- Online (awooop/core/online_plan.py): the new columns have constant defaults (a catalog
-- change, no rewrite) and their CHECKs on the reservations are NOT VALID (no scan; new rows
-- are checked); the usage table (one row per budget scope and period) gets its new key in
-- one short transaction; awooop_llm_prices is new.
CREATE TABLE awooop_llm_prices (
    price_id      uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id    text NOT NULL,
    model         text NOT NULL CHECK (length(model) BETWEEN 1 AND 200),
    input_price   numeric(20, 6) NOT NULL CHECK (input_price >= 0),
    output_price  numeric(20, 6) NOT NULL CHECK (output_price >= 0),
    set_by        text NOT NULL CHECK (length(set_by) BETWEEN 1 AND 200),
    valid_from    timestamptz NOT NULL DEFAULT now(),
    valid_to      timestamptz,
    ended_by      text CHECK (length(ended_by) BETWEEN 1 AND 200),
    CHECK ((valid_to IS NULL) = (ended_by IS NULL))
);
CREATE UNIQUE INDEX awooop_llm_prices_active_idx
    ON awooop_llm_prices (project_id, model) WHERE valid_to IS NULL;
CREATE INDEX awooop_llm_prices_project_idx
    ON awooop_llm_prices (project_id, valid_from DESC);
SELECT awooop_enforce_tenant_isolation('awooop_llm_prices');

ALTER TABLE awooop_llm_budgets
    ADD COLUMN unit text NOT NULL DEFAULT 'tokens' CHECK (unit IN ('tokens', 'cost')),
    ADD COLUMN cost bigint CHECK (cost >= 0),
    ADD CONSTRAINT awooop_llm_budgets_unit_cost_check CHECK ((unit = 'cost') = (cost IS NOT NULL));

ALTER TABLE awooop_llm_budget_usage
    ADD COLUMN unit text NOT NULL DEFAULT 'tokens' CHECK (unit IN ('tokens', 'cost')),
    DROP CONSTRAINT awooop_llm_budget_usage_pkey,
    ADD PRIMARY KEY (project_id, model, unit, period_s, period_start);

ALTER TABLE awooop_llm_reservations
    ADD COLUMN unit text NOT NULL DEFAULT 'tokens',
    ADD CONSTRAINT awooop_llm_reservations_unit_check
        CHECK (unit IN ('tokens', 'cost')) NOT VALID;

-- Retention: the finished reservations and waits, oldest first.
CREATE INDEX CONCURRENTLY awooop_llm_reservations_finished_idx
    ON awooop_llm_reservations (settled_at) WHERE state <> 'reserved';
CREATE INDEX CONCURRENTLY awooop_llm_waits_ended_idx
    ON awooop_llm_waits (ended_at) WHERE ended_at IS NOT NULL;
