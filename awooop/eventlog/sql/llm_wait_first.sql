-- llm flow: the $2 runs of project $1 that have waited longest for a model call now.
SELECT rs.run_id, w.reason, w.wait_key, w.detail, w.since, w.until
{{llm_open_waits}}
ORDER BY w.since, rs.run_id
LIMIT $2
