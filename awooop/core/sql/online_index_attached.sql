-- Whether a partition has an index attached to the partitioned index $1 (under any name: a
-- partition attached after the index was created got one from Postgres).
SELECT EXISTS (
    SELECT 1
    FROM pg_inherits i
    JOIN pg_index x ON x.indexrelid = i.inhrelid
    WHERE i.inhparent = to_regclass($1) AND x.indrelid = to_regclass($2)
)
