-- awooop: online
-- phase: expand
--
-- Concurrency keys (flow control): a contract or a channel of a project declares how many of
-- its runs may execute at once per key (the key an expression over project, channel and
-- input, awooop.runs.concurrency_rules), optionally a maximum over all its keys, and a cap on
-- the runs of one key that may wait queued.
--
-- awooop_concurrency_limits: one limit per scope (a contract or a channel of a project); intake
-- reads it. The run row keeps what intake computed from it (a pure function of the limit and
-- the input, carried by RunCreated, so replay agrees): concurrency_scope ('contract:<id>' or
-- 'channel:<type>'), concurrency_key (the scope, '/', then the expression's value: keys of two
-- scopes never share slots) and concurrency_max (the per-key maximum for that run).
--
-- A slot is not a row that could leak: a run holds one exactly while it is RUNNING or
-- WAITING_TOOL (the tool call runs inside the attempt, which keeps its lease) with a live
-- lease (lease_until > now()). So a run waiting for an approval holds none (its attempt
-- ended), and a dead attempt's slot frees itself when its lease expires. Claims admit a run
-- only through awooop_concurrency_admit, which serialises admissions per key with a
-- transaction-scoped advisory lock and counts the key's slots on a fresh snapshot.
--
-- Online (awooop/core/online_plan.py): the new columns are nullable without default (a
-- catalog change, no rewrite; code that does not know them still runs, and its claims ignore
-- the limits); the key's index is built CONCURRENTLY.
ALTER TABLE awooop_run_state
    ADD COLUMN concurrency_scope text,
    ADD COLUMN concurrency_key text,
    ADD COLUMN concurrency_max int;
ALTER TABLE awooop_run_state_view
    ADD COLUMN concurrency_scope text,
    ADD COLUMN concurrency_key text,
    ADD COLUMN concurrency_max int;

-- A key's executing runs (admission) and queued runs (the depth cap): only keyed runs.
CREATE INDEX CONCURRENTLY awooop_run_state_concurrency_idx
    ON awooop_run_state (project_id, concurrency_key, status)
    WHERE concurrency_key IS NOT NULL;

CREATE TABLE awooop_concurrency_limits (
    project_id   text NOT NULL,
    scope        text NOT NULL CHECK (scope IN ('channel', 'contract')),
    scope_key    text NOT NULL CHECK (length(scope_key) BETWEEN 1 AND 200),
    key_expr     text NOT NULL CHECK (length(key_expr) BETWEEN 1 AND 1000),
    max_expr     text NOT NULL CHECK (length(max_expr) BETWEEN 1 AND 1000),
    global_max   int CHECK (global_max >= 1),
    depth_cap    int CHECK (depth_cap >= 1),
    set_by       text NOT NULL CHECK (length(set_by) BETWEEN 1 AND 200),
    set_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, scope, scope_key)
);
SELECT awooop_enforce_tenant_isolation('awooop_concurrency_limits');
-- A producer's intake reads its limit (row-level security and its binding still apply).
GRANT SELECT ON awooop_concurrency_limits TO awooop_producer;

-- Whether one more run of key p_key (scope p_scope of project p_project, at most p_max of the
-- key executing) may start in this transaction. Volatile: each query below takes its own
-- snapshot, so the count sees every admission committed before this transaction got the
-- key's lock (an admission holds the lock until its transaction ends). The admissions of this
-- transaction that its claims have not written yet are counted in a transaction-local setting
-- (a statement claiming several runs of one key, or a poll locking several), so that they too
-- count. p_wait: wait for the lock (callers that lock keys in one sorted order), else give up
-- at once and refuse (a run refused stays dispatchable; the polling path tries again).
-- A scope with a global maximum is serialised on one lock for the whole scope.
CREATE FUNCTION awooop_concurrency_admit(
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
          AND r.status IN ('RUNNING', 'WAITING_TOOL') AND r.lease_until > now();
        v_key_free := greatest(p_max - v_key_free, 0);
        PERFORM set_config(v_slot, v_key_free::text, true);
        IF v_global IS NOT NULL AND nullif(current_setting(v_scope_slot, true), '') IS NULL THEN
            SELECT count(*) INTO v_scope_free FROM awooop_run_state AS r
            WHERE r.project_id = p_project AND r.concurrency_scope = p_scope
              AND r.status IN ('RUNNING', 'WAITING_TOOL') AND r.lease_until > now();
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
