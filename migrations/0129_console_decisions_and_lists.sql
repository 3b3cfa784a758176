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
-- The lists of bulk operations, newest first, keyset-paged by (created_at, operation_id)
-- (awooop.runs.operation_list): every project's (an admin's) and one project's, each page one
-- range of an index in its order (the project index of 0111 lacks the operation id, so a page
-- had to sort all of a project's operations). One row per operation a person confirmed: each
-- build reads a small table.
ALTER TABLE awooop_approvals ADD COLUMN decided_by text;
CREATE INDEX awooop_operations_created_idx
    ON awooop_operations (created_at DESC, operation_id DESC);
CREATE INDEX awooop_operations_project_created_idx
    ON awooop_operations (project_id, created_at DESC, operation_id DESC);
