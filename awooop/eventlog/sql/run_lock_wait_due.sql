-- run_reads.LOCK_WAIT_DUE (awooop.runs.timers.fire_due): the runs whose open wait is due (a
-- sleep's due time, an event wait's timeout) $2 seconds ago or earlier (``cutoff``: the grace
-- the timers loop leaves the worker that holds a sleep, awooop.worker.local_timers), at most
-- $1, locked; a row another transaction holds is skipped, so any number of timers loops fire
-- each wait once. The caller reads the waits again once the rows are locked (a wait of the
-- subquery may have ended meanwhile).
--
-- Fair across projects: the batch is picked round-robin over the projects with due waits,
-- each one's earliest due first, up to its share of the batch (ceil($1 / projects with due
-- waits)): every such project's first due wait comes before any project's second (``turn``),
-- so one project's thousands of waits due at one instant never hold another's back for more
-- than one batch. What the shares leave of the batch (projects with fewer due waits than
-- their share) is filled with the earliest due waits of any project (``fill``), so one
-- project alone still fires full batches. The projects with timed waits are found by a skip
-- scan of awooop_run_waits_project_due_idx (one probe each), whether each has one due and
-- its share by probes of the same index, the fill through awooop_run_waits_due_idx: the cost
-- is one probe per project with timed waits plus about two batches of rows, however many
-- waits are due.
WITH RECURSIVE cutoff AS (
    SELECT now() - make_interval(secs => $2::float8) AS at
), projects AS (
    (SELECT w.project_id FROM awooop_run_waits w
     WHERE w.due_at IS NOT NULL
     ORDER BY w.project_id LIMIT 1)
    UNION ALL
    SELECT (SELECT w.project_id FROM awooop_run_waits w
            WHERE w.due_at IS NOT NULL AND w.project_id > p.project_id
            ORDER BY w.project_id LIMIT 1)
    FROM projects p
    WHERE p.project_id IS NOT NULL
), due_projects AS (
    SELECT p.project_id FROM projects p
    WHERE p.project_id IS NOT NULL AND EXISTS (
        SELECT 1 FROM awooop_run_waits w
        WHERE w.project_id = p.project_id AND w.due_at IS NOT NULL AND w.due_at <= (SELECT at FROM cutoff))
), share AS (
    SELECT ceil($1::float8 / greatest(count(*), 1))::int AS n FROM due_projects
), due AS (
    SELECT d.run_id, d.due_at, d.turn
    FROM due_projects p
    CROSS JOIN LATERAL (
        SELECT x.run_id, x.due_at, row_number() OVER (ORDER BY x.due_at) AS turn
        FROM (SELECT w.run_id, w.due_at FROM awooop_run_waits w
              WHERE w.project_id = p.project_id AND w.due_at IS NOT NULL
                AND w.due_at <= (SELECT at FROM cutoff)
              ORDER BY w.due_at
              LIMIT (SELECT n FROM share)) x
    ) d
), fill AS (
    SELECT w.run_id, w.due_at FROM awooop_run_waits w
    WHERE w.due_at IS NOT NULL AND w.due_at <= (SELECT at FROM cutoff)
    ORDER BY w.due_at
    LIMIT $1
), picked AS (
    SELECT c.run_id, min(c.turn) AS turn, min(c.due_at) AS due_at
    FROM (SELECT run_id, due_at, turn FROM due
          UNION ALL
          SELECT run_id, due_at, NULL FROM fill) c
    GROUP BY c.run_id
)
SELECT {{run_columns}}, now() AS db_now
FROM awooop_run_state
WHERE run_id = ANY (ARRAY(SELECT run_id FROM picked ORDER BY turn NULLS LAST, due_at LIMIT $1))
  AND status = 'WAITING_EVENT'  -- the runs are found by their key, whatever the statistics
FOR UPDATE SKIP LOCKED
