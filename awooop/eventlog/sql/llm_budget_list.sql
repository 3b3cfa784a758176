-- llm flow: the budgets of project $1 (NULL: all the role sees) in force (with $2 the ended
-- ones too), newest first, at most $3, each with its current period's usage (in its unit).
SELECT b.budget_id, b.project_id, b.model, b.tokens, b.period_s, b.reserve_tokens,
       b.on_exceed, b.set_by, b.valid_from, b.valid_to, b.ended_by, b.unit, b.cost,
       p.start AS period_start, p.start + make_interval(secs => b.period_s) AS period_end,
       coalesce(u.used, 0) AS used, coalesce(u.reserved, 0) AS reserved,
       coalesce(u.calls, 0) AS calls
FROM awooop_llm_budgets b
CROSS JOIN LATERAL (
    SELECT date_bin(make_interval(secs => b.period_s), now(),
                    timestamptz '2000-01-01 00:00:00+00') AS start
) p
LEFT JOIN awooop_llm_budget_usage u
    ON u.project_id = b.project_id AND u.model = b.model AND u.unit = b.unit
   AND u.period_s = b.period_s AND u.period_start = p.start
WHERE ($1::text IS NULL OR b.project_id = $1) AND ($2 OR b.valid_to IS NULL)
ORDER BY b.valid_from DESC
LIMIT $3
