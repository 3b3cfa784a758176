-- llm flow: the tokens of rate limit row l's bucket at clock c.t: what was left at
-- refilled_at, refilled at limit_count per period_s since then, at most burst (negative while
-- callers hold tokens taken ahead).
least(l.burst, l.tokens + greatest(0, extract(epoch FROM c.t - l.refilled_at))
                          * l.limit_count / l.period_s)
