-- A page's range of open dead letters (dead_letter_page*.sql): at most $4, newest first,
-- dead-lettered since $1 and before the keyset ($2, $3).
resolved_at IS NULL
AND dead_lettered_at >= $1
AND (dead_lettered_at, dead_letter_id) < ($2, $3)
ORDER BY dead_lettered_at DESC, dead_letter_id DESC
LIMIT $4
