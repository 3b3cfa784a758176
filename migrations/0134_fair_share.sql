-- awooop: online
-- phase: expand
--
-- Fair share between projects (awooop.runs.fairness; docs/flow-control.md): waiting runs are
-- taken in start-time fair queueing order, not oldest first, so that a project with a large
-- backlog does not delay the runs of the others, and a project's weight sets its share.
--
-- - awooop_projects.share_weight: the project's weight (1 to 1000; `awooop projects set P
--   --weight N`, PUT /v1/projects/{p}/share). A project with weight 2 gets twice the starts of
--   a project with weight 1 while both have runs waiting; share_set_by/share_set_at: who set
--   it last, and when. Only the platform role writes it (an admin token): a project's own
--   token cannot raise its share over the others'.
-- - awooop_run_state.fair_tag: the run's start tag, set by intake (ingest_new.sql) from
--   awooop_fair_start(): the larger of the virtual time (the smallest tag waiting) and the tag
--   after the project's last waiting run, plus 1/weight for each run after the first of a
--   batch. A project that has nothing waiting starts at the virtual time: it neither banks
--   credit while idle nor pays for what it ran before. Not part of the projection (replay
--   leaves it NULL: such runs are taken oldest first, as before).
-- - awooop_run_state_fair_idx: the waiting runs in tag order (the claim statements' probe of
--   who is ahead, and the polling path's order); awooop_run_state_fair_project_idx: a
--   project's last waiting tag (intake). Only waiting runs with a tag have entries; a claim
--   moves the run out of both (its status changes).
--
-- Online (awooop/core/online_plan.py): both columns are catalog changes without a rewrite
-- (share_weight has a constant default; fair_tag is nullable without one); the index is built
-- CONCURRENTLY. Code that does not know fair_tag writes NULL there and keeps taking runs in
-- arrival order.
ALTER TABLE awooop_projects
    ADD COLUMN share_weight int NOT NULL DEFAULT 1 CHECK (share_weight BETWEEN 1 AND 1000),
    ADD COLUMN share_set_by text CHECK (length(share_set_by) BETWEEN 1 AND 200),
    ADD COLUMN share_set_at timestamptz;

ALTER TABLE awooop_run_state ADD COLUMN fair_tag double precision;

CREATE INDEX CONCURRENTLY awooop_run_state_fair_idx
    ON awooop_run_state (fair_tag, created_at)
    WHERE status IN ('PENDING', 'RESUMED') AND fair_tag IS NOT NULL;
CREATE INDEX CONCURRENTLY awooop_run_state_fair_project_idx
    ON awooop_run_state (project_id, fair_tag)
    WHERE status IN ('PENDING', 'RESUMED') AND fair_tag IS NOT NULL;

-- The start tag of the next run of p_project and the step between its runs (1/weight).
-- SECURITY DEFINER: the virtual time is a fact about every project's waiting runs, which a
-- producer's transaction cannot read (row-level security); the function answers two numbers
-- and nothing about any other project. Bounded: the virtual time is the smallest tag among the
-- first 64 waiting runs of projects that are not paused (a paused project's old tags would
-- hold it back, and newcomers would then jump ahead of everyone), or the 64th tag when all of
-- those are paused; the project's last tag is one backward probe of the project's index.
CREATE FUNCTION awooop_fair_start(p_project text, OUT start double precision,
                                  OUT step double precision)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    v_weight int;
    v_head double precision;
    v_last double precision;
BEGIN
    SELECT share_weight INTO v_weight FROM awooop_projects WHERE project_id = p_project;
    step := 1.0 / coalesce(v_weight, 1);
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
    SELECT r.fair_tag INTO v_last
    FROM awooop_run_state AS r
    WHERE r.status IN ('PENDING', 'RESUMED') AND r.fair_tag IS NOT NULL
      AND r.project_id = p_project
    ORDER BY r.fair_tag DESC
    LIMIT 1;
    start := greatest(coalesce(v_head, 0), coalesce(v_last + step, 0));
END
$$;
REVOKE ALL ON FUNCTION awooop_fair_start(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION awooop_fair_start(text) TO awooop_producer, awooop_app, awooop_platform;
