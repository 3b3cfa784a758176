-- A table's kind ('p': partitioned) and its estimated rows, its partitions' included; NULL kind
-- when there is no such table.
SELECT c.relkind::text AS kind,
       (greatest(c.reltuples, 0) + coalesce((
           SELECT sum(greatest(p.reltuples, 0))
           FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhrelid
           WHERE i.inhparent = c.oid), 0))::bigint AS rows
FROM pg_class c
WHERE c.oid = to_regclass($1)
