-- phase: expand
--
-- What a handler's approval request offers and what the reviewer answers
-- (awooop.runs.approvals, awooop.runs.approval_options):
--
-- payload: the draft the handler shows the reviewer (run.wait_for_approval(payload=...)), null
-- for none. on_reject, on_expire: 'fail' (the run fails, E-APPROVAL-004 / E-APPROVAL-002) or
-- 'return' (the run resumes and the handler gets the decision). decision_reason: the reviewer's
-- reason for an approval or a rejection ('' for none or an expiry). edited_payload: the
-- payload the reviewer edited with the decision, null for none.
--
-- Columns with constant defaults or nullable: a catalog change, no rewrite; the previous
-- release neither reads nor writes them (its requests get 'fail', as it behaves).
ALTER TABLE awooop_approvals
    ADD COLUMN payload jsonb,
    ADD COLUMN on_reject text NOT NULL DEFAULT 'fail' CHECK (on_reject IN ('fail', 'return')),
    ADD COLUMN on_expire text NOT NULL DEFAULT 'fail' CHECK (on_expire IN ('fail', 'return')),
    ADD COLUMN decision_reason text NOT NULL DEFAULT '',
    ADD COLUMN edited_payload jsonb;
