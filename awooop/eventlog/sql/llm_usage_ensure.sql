-- llm flow: the counter row of project $1, model scope $2, unit $4 ('tokens' or 'cost') and
-- the period of $3 seconds that holds now(), made if missing; answers the period's start and
-- end, and now().
WITH period AS (
    SELECT date_bin(make_interval(secs => $3::integer), now(),
                    timestamptz '2000-01-01 00:00:00+00') AS start
), made AS (
    INSERT INTO awooop_llm_budget_usage (project_id, model, unit, period_s, period_start)
    SELECT $1, $2, $4, $3::integer, start FROM period
    ON CONFLICT DO NOTHING
)
SELECT start, start + make_interval(secs => $3::integer) AS period_end, now() AS now
FROM period
