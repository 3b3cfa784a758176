-- The steps of an online migration that completed (their statement's checksum: a step whose
-- statement changed since runs again).
SELECT step, checksum FROM awooop_online_migration_steps WHERE migration = $1
