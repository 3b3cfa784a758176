-- Single-leader loops hold leadership by a lease (awooop/core/leadership.py, R-19). One row per
-- leadership name: who holds it (holder), its term (incremented at every acquisition: the
-- fencing token every write of the leader is checked against) and until when the lease runs
-- (lease_until, set from the database clock). A holder renews with a conditional UPDATE
-- (same holder, same term, lease not yet run out); a candidate acquires only a lease that has
-- run out or was released. A frozen leader therefore loses leadership when its lease runs out,
-- with no session or lock of its own to wait for. Platform table without project_id: only
-- platform loops (role awooop_platform) read and write it.
CREATE TABLE awooop_leaders (
    name         text PRIMARY KEY,
    holder       text,
    term         bigint NOT NULL DEFAULT 0,
    lease_until  timestamptz NOT NULL DEFAULT '-infinity',
    acquired_at  timestamptz,
    renewed_at   timestamptz
);
INSERT INTO awooop_leaders (name) VALUES ('relay');

REVOKE ALL ON awooop_leaders FROM awooop_app;
GRANT SELECT, INSERT, UPDATE ON awooop_leaders TO awooop_platform;
