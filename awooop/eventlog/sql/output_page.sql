-- output_log.page: what a reader of a run's output gets in one statement (one snapshot): the
-- run's status and attempt count, and its rows from seq $2 on (the row at $2 itself tells the
-- reader the attempt it resumes after), at most $3 rows, in order, through the primary key.
-- A snapshot that sees the run finished also sees every row written before it finished: an
-- attempt flushes its output before its last event, and a fenced-off attempt writes none after.
-- No row when the run does not exist (or row-level security hides it).
SELECT r.status, r.attempt_count, o.seq, o.attempt, o.start_offset, o.end_offset, o.text,
       o.truncated, o.created_at
FROM awooop_run_state AS r
LEFT JOIN LATERAL (
    SELECT *
    FROM awooop_run_output AS x
    WHERE x.run_id = r.run_id AND x.seq >= $2
    ORDER BY x.seq
    LIMIT $3
) AS o ON true
WHERE r.run_id = $1
ORDER BY o.seq
