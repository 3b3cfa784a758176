-- phase: expand
--
-- Worker sessions: a worker holds its leases through one row, so that its heartbeat writes one
-- row per interval whatever the number of runs it holds.
--
-- A worker of this release (AWOOOP_SESSION_LEASES, the default) starts a session before its
-- first claim and renews it every AWOOOP_HEARTBEAT_INTERVAL_S by AWOOOP_LEASE_TTL_S: one row.
-- Its claims give each run a lease of its own that is longer (AWOOOP_RUN_LEASE_TTL_S), renewed
-- only when half of it is gone or when the attempt's current step changes. A run's lease is
-- live while both are: its own lease_until, and its worker's session when the worker has one
-- (awooop/eventlog/sql/_lease_expired.sql and _lease_live.sql write the rule once). A worker
-- that dies loses every lease when its session runs out, as when each was renewed on its own;
-- a run a live worker forgot runs out with its own lease.
--
-- lease_until is renewed only if it has not run out (a stalled worker cannot revive its
-- leases: it starts a new session, and first gives up the runs its earlier session held).
-- started_at tells a worker's runs from those of an earlier process that used the same
-- worker id. Rows are pruned by the workers a day after they ran out (no run lease outlives
-- its session by more than AWOOOP_RUN_LEASE_TTL_S).
--
-- Only the platform role writes it. The tenant role reads the sessions of the workers that hold
-- its own runs (row-level security: the runs it can see), so that its reads of a run's lease
-- (a peek, a fence check) answer as the platform's do, and nothing of other workers.
--
-- A run holds a slot of its concurrency key while its lease is live by this rule:
-- awooop_concurrency_admit() (migration 0135's, the same but for the session) counts the
-- slots so, and a dead worker's slots end with its session.
--
-- Expand: a new table, and a function replaced with its signature. The previous release never
-- reads the table and judges every lease by lease_until alone; a run held by a worker of this release has a longer lease_until,
-- so the previous release takes such a run only later than this release does, never while it
-- is live.
CREATE TABLE awooop_worker_sessions (
    worker_id   text PRIMARY KEY CHECK (length(worker_id) BETWEEN 1 AND 200),
    lease_until timestamptz NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    renewed_at  timestamptz NOT NULL DEFAULT clock_timestamp()
) WITH (fillfactor = 50);

ALTER TABLE awooop_worker_sessions ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON awooop_worker_sessions FROM awooop_app;
GRANT SELECT ON awooop_worker_sessions TO awooop_app;
-- The policy asks a function, whose body names awooop_run_state only when it runs: a policy
-- that named the table would depend on it, and a replay's swap of the table (awooop/projections)
-- carries no such dependent over. Invoker's rights: the tenant sees only its own runs there.
CREATE FUNCTION awooop_session_holds_my_runs(p_worker text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM public.awooop_run_state AS r
                   WHERE r.worker_id = p_worker AND r.status IN ('RUNNING', 'WAITING_TOOL'));
END
$$;
CREATE POLICY holds_my_runs ON awooop_worker_sessions FOR SELECT TO awooop_app
    USING (awooop_session_holds_my_runs(worker_id));
GRANT SELECT, INSERT, UPDATE, DELETE ON awooop_worker_sessions TO awooop_platform;

CREATE OR REPLACE FUNCTION awooop_concurrency_admit(
    p_project text, p_scope text, p_key text, p_max int, p_wait boolean
) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_global int;
    v_lock bigint;
    v_slot text := 'awooop_ck.k' || md5(p_project || chr(31) || p_key);
    v_scope_slot text := 'awooop_ck.s' || md5(p_project || chr(31) || p_scope);
    v_left text;
    v_scope_left text;
    v_key_free int;
    v_scope_free int;
BEGIN
    IF p_key IS NULL THEN
        RETURN true;
    END IF;
    v_left := nullif(current_setting(v_slot, true), '');
    IF v_left IS NULL THEN
        SELECT l.global_max INTO v_global FROM awooop_concurrency_limits AS l
        WHERE l.project_id = p_project AND l.scope || ':' || l.scope_key = p_scope;
        IF v_global IS NULL THEN
            v_lock := hashtextextended(p_project || chr(31) || p_key, 4);
        ELSE
            v_lock := hashtextextended(p_project || chr(31) || p_scope, 4);
        END IF;
        IF p_wait THEN
            PERFORM pg_advisory_xact_lock(v_lock);
        ELSIF NOT pg_try_advisory_xact_lock(v_lock) THEN
            RETURN false;
        END IF;
        SELECT count(*) INTO v_key_free FROM awooop_run_state AS r
        WHERE r.project_id = p_project AND r.concurrency_key = p_key
          AND r.status = 'RUNNING' AND r.lease_until > now()
          AND coalesce((SELECT s.lease_until > now() FROM awooop_worker_sessions AS s
                        WHERE s.worker_id = r.worker_id), true);
        v_key_free := greatest(p_max - v_key_free, 0);
        PERFORM set_config(v_slot, v_key_free::text, true);
        IF v_global IS NOT NULL AND nullif(current_setting(v_scope_slot, true), '') IS NULL THEN
            SELECT count(*) INTO v_scope_free FROM awooop_run_state AS r
            WHERE r.project_id = p_project AND r.concurrency_scope = p_scope
              AND r.status = 'RUNNING' AND r.lease_until > now()
              AND coalesce((SELECT s.lease_until > now() FROM awooop_worker_sessions AS s
                            WHERE s.worker_id = r.worker_id), true);
            PERFORM set_config(v_scope_slot, greatest(v_global - v_scope_free, 0)::text, true);
        ELSIF v_global IS NULL THEN
            PERFORM set_config(v_scope_slot, '-1', true);
        END IF;
    END IF;
    v_key_free := current_setting(v_slot)::int;
    v_scope_left := current_setting(v_scope_slot, true);
    v_scope_free := coalesce(nullif(v_scope_left, '')::int, -1);
    IF v_key_free <= 0 OR v_scope_free = 0 THEN
        RETURN false;
    END IF;
    PERFORM set_config(v_slot, (v_key_free - 1)::text, true);
    IF v_scope_free > 0 THEN
        PERFORM set_config(v_scope_slot, (v_scope_free - 1)::text, true);
    END IF;
    RETURN true;
END
$$;
