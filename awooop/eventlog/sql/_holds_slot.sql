-- Whether a run row holds a slot of its concurrency key: RUNNING with a live lease (migrations
-- 0132 and 0135; a run waiting for its tool, an approval or a retry holds none, and a dead
-- attempt's slot ends with its lease). The columns are those of the innermost
-- awooop_run_state of the query, unqualified. awooop_concurrency_admit() counts the same.
(status = 'RUNNING' AND lease_until > now())
