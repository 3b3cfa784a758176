-- awooop.eventlog.deadletters.open_counts: open dead letters per project (the stats loop, as the
-- platform role), from awooop_dead_letters_open_idx.
SELECT project_id, count(*) AS open FROM awooop_dead_letters
WHERE resolved_at IS NULL GROUP BY project_id
