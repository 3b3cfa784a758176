-- run_reads.LOCK_EXPIRED (leases.take_expired): one run whose lease expired, locked (a worker
-- takes it: requeue and claim in one transaction).
SELECT {{run_columns}}, now() AS db_now, {{run_paused}} AS paused,
       NOT {{run_admitted}} AS over_limit
FROM awooop_run_state AS r
WHERE run_id = $1
  AND status IN ('RUNNING', 'WAITING_TOOL')
  AND lease_until < now()
FOR UPDATE SKIP LOCKED
