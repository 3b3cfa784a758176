INSERT INTO awooop_online_migration_steps (migration, step, checksum, rows)
VALUES ($1, $2, $3, $4)
ON CONFLICT (migration, step) DO UPDATE
SET checksum = excluded.checksum, rows = excluded.rows, done_at = now()
