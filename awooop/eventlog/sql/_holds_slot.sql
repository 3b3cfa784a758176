-- Whether a run row holds a slot of its concurrency key: RUNNING with a live lease (migrations
-- 0132 and 0135; a run waiting for its tool, an approval or a retry holds none, and a dead
-- attempt's slot ends with its lease). The columns are those of the innermost
-- awooop_run_state of the query, unqualified. awooop_concurrency_admit() counts the same. The
-- lease is live by the rule of _lease_live.sql (its own lease_until and its worker's session,
-- migration 0161), written here for an unqualified row: a dead worker's slots end with its
-- session.
(status = 'RUNNING' AND lease_until > now()
 AND coalesce((SELECT s.lease_until > now() FROM awooop_worker_sessions AS s
               WHERE s.worker_id = awooop_run_state.worker_id), true))
