-- Whether an index of that name exists, and whether it is valid (an interrupted CREATE INDEX
-- CONCURRENTLY leaves an invalid one behind).
SELECT x.indisvalid AS valid
FROM pg_index x
WHERE x.indexrelid = to_regclass($1)
