-- schedules.due: the earliest due moment of any schedule not paused (NULL: none), one probe
-- of awooop_schedules_due_idx: the loop's look when nothing is due costs no more than this.
SELECT min(due_at) FROM awooop_schedules WHERE paused_at IS NULL
