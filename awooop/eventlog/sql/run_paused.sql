-- run_reads.PAUSED (leases.fail_undeliverable): whether run $1 is held back: paused
-- (_run_paused.sql), or every slot of its concurrency key held (RUNNING with a live lease,
-- migrations 0132 and 0135; read only: no admission is taken).
SELECT {{run_paused}}
       OR (r.concurrency_key IS NOT NULL
           AND (SELECT count(*) FROM awooop_run_state AS k
                WHERE k.project_id = r.project_id AND k.concurrency_key = r.concurrency_key
                  AND k.status = 'RUNNING' AND k.lease_until > now()) >= r.concurrency_max)
FROM awooop_run_state AS r
WHERE run_id = $1
