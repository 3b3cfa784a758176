-- llm flow: the model scopes call $3 of attempt $2 of run $1 reserved on, in lock order.
SELECT model FROM awooop_llm_reservations
WHERE run_id = $1 AND attempt = $2 AND seq = $3
ORDER BY model
