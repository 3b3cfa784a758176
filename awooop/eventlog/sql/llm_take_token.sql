-- llm flow: take the next token of rate limit $1 (a virtual-time token bucket: limit_count per
-- period_s, at most burst, refilled from the database clock since refilled_at). The bucket
-- may go negative: a call takes the next token even before it is there and answers when it
-- is due (``due``), so waiting callers form a queue instead of polling. No row: the token is
-- due further than $2 seconds ahead (or the limit is no longer in force). The clock is read
-- once; a statement that waited for the row lock sees the bucket as its holder left it and
-- credits no time before its refilled_at, so it never grants more than the rate.
UPDATE awooop_llm_rate_limits l
SET tokens = {{llm_bucket_level}} - 1,
    refilled_at = greatest(l.refilled_at, c.t),
    granted = l.granted + 1
FROM (SELECT clock_timestamp() AS t) c
WHERE l.limit_id = $1 AND l.valid_to IS NULL
  AND {{llm_bucket_level}} - 1 >= -($2 * l.limit_count / l.period_s)
RETURNING c.t + make_interval(secs => greatest(0, -l.tokens) * l.period_s / l.limit_count)
          AS due,
          c.t AS now
