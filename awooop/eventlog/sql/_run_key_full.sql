-- Whether every slot of the run row ``r``'s concurrency key is held (_holds_slot.sql), as a
-- read sees it: no lock, no admission (awooop_concurrency_admit decides when a claim takes
-- one). False for a run without a key.
(r.concurrency_key IS NOT NULL
 AND (SELECT count(*) FROM awooop_run_state
      WHERE project_id = r.project_id AND concurrency_key = r.concurrency_key
        AND {{holds_slot}}) >= r.concurrency_max)
