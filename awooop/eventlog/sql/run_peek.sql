-- run_reads.PEEK (leases.peek): one run's committed row, no lock, and the database clock;
-- lease_seen is its lease as the rule sees it (_run_lease_until.sql: its worker's session too).
SELECT {{run_columns}}, now() AS db_now, {{run_lease_until}} AS lease_seen
FROM awooop_run_state AS r WHERE run_id = $1
