-- The partitions of a table (none for a plain table) with their estimated rows, by name.
SELECT c.relname::text AS name, greatest(c.reltuples, 0)::bigint AS rows
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = to_regclass($1)
ORDER BY c.relname
