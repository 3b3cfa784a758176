-- awooop.eventlog.deadletters.list_open: open dead letters newest first, keyset-paged by
-- ($2 dead_lettered_at, $3 dead_letter_id); $1: one project, or null for every project the
-- role sees. Served by awooop_dead_letters_project_open_idx or awooop_dead_letters_open_idx.
SELECT *
FROM awooop_dead_letters
WHERE resolved_at IS NULL
  AND ($1::text IS NULL OR project_id = $1)
  AND ($2::timestamptz IS NULL OR (dead_lettered_at, dead_letter_id) < ($2, $3::uuid))
ORDER BY dead_lettered_at DESC, dead_letter_id DESC
LIMIT $4
