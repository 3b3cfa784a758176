-- awooop: online
-- phase: expand
--
-- awooop_fair_start (0134) reads the head of the fair order only when the answer needs it.
--
-- Every intake statement asks it for the project's start tag: the larger of the virtual time
-- (the smallest tag among the first 64 waiting runs of projects that are not paused, or the
-- 64th tag when all of those are paused) and the project's last waiting tag + its step. The
-- virtual time took 64 rows of the fair index and a probe of the pauses for each: 0.084 of the
-- 0.61 ms the ingest statement took with 3,000 runs waiting (EXPLAIN ANALYZE of its generic
-- plan), the largest part of it, and paid again by every submit of a project with a backlog.
--
-- When the project has a waiting run with a tag and is not paused, the virtual time cannot be
-- larger than its last tag, so the answer is its last tag + step without reading the head:
-- either one of its runs is among the 64 first (it counts, not paused: the smallest tag of the
-- unpaused ones is at most that run's, at most the last) or all 64 come before its first run
-- in (tag, created_at) order (every tag there, hence the smallest unpaused one or, all paused,
-- the largest, is at most its first tag, at most the last). The step is positive (weight 1 to
-- 1000). Otherwise (no waiting run, or the project paused) the head is read as before. The
-- answers are the same in every state (tests/integration/test_fair_start.py compares them with
-- 0134's on generated states); one snapshot for all of it, as before (STABLE).
--
-- CREATE OR REPLACE keeps the function's owner and grants; its options are restated.
CREATE OR REPLACE FUNCTION awooop_fair_start(p_project text, OUT start double precision,
                                             OUT step double precision)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    v_weight int;
    v_head double precision;
    v_last double precision;
BEGIN
    SELECT share_weight INTO v_weight FROM awooop_projects WHERE project_id = p_project;
    step := 1.0 / coalesce(v_weight, 1);
    SELECT r.fair_tag INTO v_last
    FROM awooop_run_state AS r
    WHERE r.status IN ('PENDING', 'RESUMED') AND r.fair_tag IS NOT NULL
      AND r.project_id = p_project
    ORDER BY r.fair_tag DESC
    LIMIT 1;
    IF v_last IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM awooop_flow_pauses AS p
        WHERE p.project_id = p_project AND p.scope = 'project' AND p.resumed_at IS NULL
    ) THEN
        start := v_last + step;
        RETURN;
    END IF;
    SELECT coalesce(min(w.fair_tag) FILTER (WHERE NOT w.paused), max(w.fair_tag)) INTO v_head
    FROM (
        SELECT r.fair_tag,
               EXISTS (SELECT 1 FROM awooop_flow_pauses AS p
                       WHERE p.project_id = r.project_id AND p.scope = 'project'
                         AND p.resumed_at IS NULL) AS paused
        FROM awooop_run_state AS r
        WHERE r.status IN ('PENDING', 'RESUMED') AND r.fair_tag IS NOT NULL
        ORDER BY r.fair_tag, r.created_at
        LIMIT 64
    ) AS w;
    start := greatest(coalesce(v_head, 0), coalesce(v_last + step, 0));
END
$$;
