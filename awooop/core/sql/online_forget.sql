-- An applied migration's steps: its row in awooop_schema_migrations says it all now.
DELETE FROM awooop_online_migration_steps WHERE migration = $1
