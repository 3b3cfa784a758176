-- schedules.due (platform role, every project): at most $2 schedules whose due moment has
-- come at $1 (the loop's clock), in due order across projects; among schedules due at the
-- same moment, each project's first before any project's second, and so on, so that a
-- project with thousands of schedules due at one moment does not push another's behind them
-- all. The projects with schedules are walked one index probe each (a loose scan of
-- awooop_schedules_project_due_idx), and each project gives at most $2 of its due schedules
-- (one probe of the same index): the cost grows with the projects that have schedules, not
-- with their schedules. Nothing is locked here: each schedule is locked and fired in a
-- transaction of its own (schedule_lock_due.sql).
WITH RECURSIVE projects AS (
    SELECT min(project_id) AS project_id FROM awooop_schedules WHERE paused_at IS NULL
    UNION ALL
    SELECT (SELECT min(s.project_id) FROM awooop_schedules s
            WHERE s.paused_at IS NULL AND s.project_id > p.project_id)
    FROM projects p
    WHERE p.project_id IS NOT NULL
), heads AS (
    SELECT d.schedule_id, d.project_id, d.next_fire_at, d.due_at,
           row_number() OVER (PARTITION BY d.project_id ORDER BY d.due_at, d.schedule_id)
               AS place
    FROM projects p
    CROSS JOIN LATERAL (
        SELECT s.schedule_id, s.project_id, s.next_fire_at, s.due_at
        FROM awooop_schedules s
        WHERE s.project_id = p.project_id AND s.paused_at IS NULL AND s.due_at <= $1
        ORDER BY s.due_at, s.schedule_id
        LIMIT $2
    ) AS d
)
SELECT schedule_id, project_id, next_fire_at, due_at
FROM heads
ORDER BY due_at, place, schedule_id
LIMIT $2
