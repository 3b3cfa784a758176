-- run_reads.PAUSED (leases.fail_undeliverable): whether run $1 is paused (_run_paused.sql).
SELECT {{run_paused}}
FROM awooop_run_state AS r
WHERE run_id = $1
