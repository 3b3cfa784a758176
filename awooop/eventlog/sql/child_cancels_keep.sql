-- child_waits.cancel_children: remember cancelled parents whose children are left to cancel
-- (the timers loop's work; its trigger rings the loop).
INSERT INTO awooop_child_cancels (parent_run_id, project_id)
SELECT * FROM unnest($1::uuid[], $2::text[])
ON CONFLICT (parent_run_id) DO NOTHING
