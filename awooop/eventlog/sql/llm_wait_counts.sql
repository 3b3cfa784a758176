-- llm flow: how many of project $1's runs wait now, per reason (rate_limited, over_budget)
-- and key (the limit's or budget's), with the oldest wait's start.
SELECT w.reason, w.wait_key, count(*)::int AS runs, min(w.since) AS oldest
{{llm_open_waits}}
GROUP BY w.reason, w.wait_key
ORDER BY w.reason, w.wait_key
