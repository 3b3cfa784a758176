-- run_reads.PAUSED (leases.fail_undeliverable): whether run $1 is held back: paused
-- (_run_paused.sql), or every slot of its concurrency key held (_run_key_full.sql).
SELECT {{run_paused}} OR {{run_key_full}}
FROM awooop_run_state AS r
WHERE run_id = $1
