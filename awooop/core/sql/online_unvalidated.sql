-- The partitions of $1 on which constraint $2 is not validated yet, with their estimated rows.
SELECT t.relname::text AS name, greatest(t.reltuples, 0)::bigint AS rows
FROM pg_constraint c
JOIN pg_class t ON t.oid = c.conrelid
JOIN pg_inherits i ON i.inhrelid = c.conrelid
WHERE i.inhparent = to_regclass($1) AND c.conname = $2 AND NOT c.convalidated
ORDER BY t.relname
