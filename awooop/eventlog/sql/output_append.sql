-- output_log.append: one flush of a run's streamed output, one row, under the attempt's lease
-- fence, as one statement (autocommit on the worker's run pool). ``fence`` is the rule of every
-- fenced write (RUNNING or WAITING_TOOL, this worker and attempt, the lease live by the
-- database clock: _lease_live.sql), taken FOR SHARE: a claim, cancel or reap of the run waits
-- for this statement and this statement for them, then sees their row (a fenced-off attempt
-- appends nothing).
-- ``head`` is the run's last row (seq, end offset, truncated): the row is appended after it
-- while it fits in $7 bytes (AWOOOP_OUTPUT_MAX_BYTES) and no truncation marker was written;
-- else nothing is written and the answer says where the log stands. A written row rings
-- readers (pg_notify, sent when the statement commits) on the output channel, payload the run.
-- $1 run, $2 worker, $3 attempt, $4 text, $5 its UTF-8 bytes, $6 the truncation marker, $7 the
-- limit. Answers one row: held (the fence), seq and at (the head before), truncated,
-- written (the new row's seq or NULL).
WITH fence AS (
    SELECT r.run_id, r.project_id
    FROM awooop_run_state AS r
    WHERE r.run_id = $1 AND r.worker_id = $2 AND r.attempt_count = $3
      AND r.status IN ('RUNNING', 'WAITING_TOOL') AND {{lease_live}}
    FOR SHARE
), last AS (
    SELECT o.seq, o.end_offset, o.truncated
    FROM awooop_run_output AS o
    WHERE o.run_id = $1
    ORDER BY o.seq DESC
    LIMIT 1
), head AS (
    SELECT coalesce((SELECT seq FROM last), 0) AS seq,
           coalesce((SELECT end_offset FROM last), 0) AS at,
           coalesce((SELECT truncated FROM last), false) AS truncated
), written AS (
    INSERT INTO awooop_run_output
        (run_id, seq, project_id, attempt, start_offset, end_offset, text, truncated)
    SELECT f.run_id, h.seq + 1, f.project_id, $3::int, h.at, h.at + $5::bigint, $4::text,
           $6::boolean
    FROM fence AS f CROSS JOIN head AS h
    WHERE NOT h.truncated AND h.at + $5::bigint <= $7::bigint
    RETURNING seq
), rung AS (
    SELECT pg_notify('awooop_run_output', $1::text) FROM written
)
SELECT (SELECT count(*) FROM fence) > 0 AS held, h.seq, h.at, h.truncated,
       (SELECT seq FROM written) AS written, (SELECT count(*) FROM rung) AS rung
FROM head AS h
