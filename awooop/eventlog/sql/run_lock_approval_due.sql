-- run_reads.LOCK_APPROVAL_DUE (approvals.expire_due): runs whose approval expired, oldest
-- first, at most $1, through the partial index on WAITING_APPROVAL, locked.
SELECT {{run_columns}}, now() AS db_now
FROM awooop_run_state
WHERE status = 'WAITING_APPROVAL' AND approval_expires_at <= now()
ORDER BY approval_expires_at
LIMIT $1
FOR UPDATE SKIP LOCKED
