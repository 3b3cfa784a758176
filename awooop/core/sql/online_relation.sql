-- A table's kind ('p': partitioned) and its estimated rows: a partitioned table's are the sum
-- of its partitions' (its own reltuples, once analysed, would count them twice).
SELECT c.relkind::text AS kind,
       CASE WHEN c.relkind = 'p' THEN coalesce((
                SELECT sum(greatest(p.reltuples, 0))
                FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhrelid
                WHERE i.inhparent = c.oid), 0)
            ELSE greatest(c.reltuples, 0) END::bigint AS rows
FROM pg_class c
WHERE c.oid = to_regclass($1)
