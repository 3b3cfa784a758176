-- Whether every slot of the run row ``r``'s concurrency key is held (runs RUNNING or
-- WAITING_TOOL with a live lease, migration 0132), as a read sees it: no lock, no admission
-- (awooop_concurrency_admit decides when a claim takes one). False for a run without a key.
(r.concurrency_key IS NOT NULL
 AND (SELECT count(*) FROM awooop_run_state AS k
      WHERE k.project_id = r.project_id AND k.concurrency_key = r.concurrency_key
        AND k.status IN ('RUNNING', 'WAITING_TOOL')
        AND k.lease_until > now()) >= r.concurrency_max)
