-- Whether the run row ``r`` (awooop_run_state AS r) may start now under its concurrency key
-- (migration 0132; awooop.runs.concurrency): a run without a key always may; a keyed run only
-- while its key (and its scope, with a global maximum) has a free slot, counted on the runs
-- holding a live lease. awooop_concurrency_admit serialises admissions per key with a
-- transaction-scoped advisory lock held until the claim commits, and counts this
-- transaction's earlier admissions, so no two claims, on any worker, both take the last slot.
-- Here it does not wait for the lock (these statements lock rows in an order of their own):
-- a run refused while another claim holds its key stays dispatchable for the polling path.
(r.concurrency_key IS NULL
 OR awooop_concurrency_admit(r.project_id, r.concurrency_scope, r.concurrency_key,
                             r.concurrency_max, false))
