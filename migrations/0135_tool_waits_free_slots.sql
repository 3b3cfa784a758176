-- phase: expand
--
-- Tool waits hold no concurrency slot (flow control, migration 0132). A slot is counted on
-- executing attempts only: a run of a key holds one exactly while it is RUNNING with a live
-- lease (lease_until > now()). A run in WAITING_TOOL keeps its attempt's lease (the worker
-- renews it while the tool call runs) but executes nothing of its handler, so it holds none:
-- its key may admit another run meanwhile. When the tool answers, the attempt continues only
-- through awooop_concurrency_admit, in the transaction that writes the WAITING_TOOL -> RUNNING
-- transition (ToolResultReceived, fenced under the attempt's lease; awooop.worker.tool_waits).
-- Refused, the attempt stays WAITING_TOOL with its lease, records its wait in
-- awooop_llm_waits (reason over_concurrency_limit: blocked_on names the key) and tries again
-- when a slot frees.
--
-- Still nothing that could leak: the count reads the run rows, and a slot is the lease of a
-- RUNNING attempt. A holder killed at any point frees it when its lease expires; a holder
-- killed while waiting for its tool or for re-admission never held one; a transaction killed
-- between the admission and its commit wrote nothing, and its advisory lock ended with it.
--
-- Expand: CREATE OR REPLACE keeps the function's signature, and the previous release calls it
-- the same way; its workers go back from a tool wait to RUNNING without admission (their
-- tool waits are no longer counted): docs/releases.md says how to upgrade a fleet that uses
-- concurrency keys. The wait reason's CHECK grows by one value: the table is scanned under
-- its exclusive lock (one row per run whose attempt ever waited on a flow limit).
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
          AND r.status = 'RUNNING' AND r.lease_until > now();
        v_key_free := greatest(p_max - v_key_free, 0);
        PERFORM set_config(v_slot, v_key_free::text, true);
        IF v_global IS NOT NULL AND nullif(current_setting(v_scope_slot, true), '') IS NULL THEN
            SELECT count(*) INTO v_scope_free FROM awooop_run_state AS r
            WHERE r.project_id = p_project AND r.concurrency_scope = p_scope
              AND r.status = 'RUNNING' AND r.lease_until > now();
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

ALTER TABLE awooop_llm_waits
    DROP CONSTRAINT awooop_llm_waits_reason_check,
    ADD CONSTRAINT awooop_llm_waits_reason_check
        CHECK (reason IN ('rate_limited', 'over_budget', 'over_concurrency_limit'));
