-- fairness.set_share: the weight $2 of project $1 in the fair order between projects, set by
-- $3 (migrations/0134_fair_share.sql). A project not seen yet is registered with it, so that
-- its first runs already get their share. Platform role only.
INSERT INTO awooop_projects AS p (project_id, share_weight, share_set_by, share_set_at)
VALUES ($1, $2, $3, now())
ON CONFLICT (project_id) DO UPDATE
    SET share_weight = EXCLUDED.share_weight, share_set_by = EXCLUDED.share_set_by,
        share_set_at = EXCLUDED.share_set_at
RETURNING p.project_id, p.share_weight, p.share_set_by, p.share_set_at
