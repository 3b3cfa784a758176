-- `awooop doctor` (platform role) compares applied migrations with the files. The table is
-- created by the migrator before 0001's default privileges exist, so grant it explicitly.
GRANT SELECT ON awooop_schema_migrations TO awooop_platform;
