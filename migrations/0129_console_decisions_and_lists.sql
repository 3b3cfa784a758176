-- phase: expand
--
-- The console's decisions by session and its lists of operations.
--
-- awooop_approvals.decided_by: the person who approved or rejected from a console session or
-- a management token without the approval token (awooop.runs.approvals.decide_as); actor then
-- holds that token (<scope>-token:<id>). Null for a decision by the approval token, an expiry,
-- and every row decided before. A nullable column without a default: a catalog change, no
-- rewrite; the previous release neither reads nor writes it.
--
-- awooop_operations_created_idx: an admin's list of every project's bulk operations, newest
-- first, keyset-paged by (created_at, operation_id) (awooop.runs.operation_list). One row per
-- operation a person confirmed: the build reads a small table.
ALTER TABLE awooop_approvals ADD COLUMN decided_by text;
CREATE INDEX awooop_operations_created_idx
    ON awooop_operations (created_at DESC, operation_id DESC);
