-- llm flow: run $1's attempt $2 no longer waits.
UPDATE awooop_llm_waits SET ended_at = now()
WHERE run_id = $1 AND attempt = $2 AND ended_at IS NULL
