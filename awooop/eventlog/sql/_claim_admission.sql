-- The admission of claimable runs, after the caller's ``ready`` (the rows it locked that may be
-- claimed now: run_id, project_id, concurrency_scope, concurrency_key, concurrency_max,
-- fair_tag, paused) and ``served`` (_run_served.sql), with $5 the fair share's switch
-- (claim_many.sql, fire_claim.sql). Answers ``deferred`` (its place in the fair order),
-- ``refused`` (its concurrency key at its limit) and ``held_back`` (either, or paused): the
-- runs of ``ready`` the caller leaves unclaimed.
deferred AS MATERIALIZED (
    -- Fair share ($5; migrations/0134_fair_share.sql): a run is not taken from its message
    -- while a run of another project that could start now is more than one step ahead of it
    -- in the fair order. The probe reads the first 16 waiting runs with a smaller tag (bounded
    -- whatever the backlog; a probe that finds only paused or full-key runs defers nothing).
    -- A deferred run stays dispatchable and is answered ``deferred`` (its message is done with):
    -- the worker's polling path takes the waiting runs in fair order at once
    -- (run_lock_fair.sql).
    SELECT a.run_id FROM ready AS a
    WHERE $5 AND NOT a.paused AND a.fair_tag IS NOT NULL
      AND EXISTS (
          SELECT 1 FROM (
              SELECT r.project_id, r.channel_type, r.contract_id, r.lease_until,
                     r.suspect_worker_id, r.concurrency_key, r.concurrency_max
              FROM awooop_run_state AS r
              WHERE r.status IN ('PENDING', 'RESUMED') AND r.fair_tag IS NOT NULL
                AND r.fair_tag < a.fair_tag - 1
              ORDER BY r.fair_tag, r.created_at
              LIMIT 16
          ) AS r
          WHERE r.project_id <> a.project_id
            AND (r.lease_until IS NULL OR r.lease_until < now())
            AND r.suspect_worker_id IS NULL
            AND {{run_served}}  -- only runs this worker could take instead
            AND NOT {{run_paused}}
            AND NOT {{run_key_full}})
), refused AS (
    -- Concurrency keys (_run_admitted.sql says how): here the keyed runs are admitted in
    -- (project, scope, key) order, waiting for each key's lock, so that two batches lock their
    -- keys in one order and cannot deadlock. Deferred runs are not admitted (an admission
    -- counts until the transaction ends).
    SELECT k.run_id FROM (
        SELECT run_id, project_id, concurrency_scope, concurrency_key, concurrency_max
        FROM ready WHERE NOT paused AND concurrency_key IS NOT NULL
          AND run_id NOT IN (SELECT run_id FROM deferred)
        ORDER BY project_id, concurrency_scope, concurrency_key, run_id
        OFFSET 0
    ) AS k
    WHERE NOT awooop_concurrency_admit(k.project_id, k.concurrency_scope, k.concurrency_key,
                                       k.concurrency_max, true)
), held_back AS (
    -- Claimable but paused (its project, channel or contract), over its concurrency limit or
    -- deferred: left as it is, and answered ``paused`` so that the worker acknowledges its
    -- message; resuming dispatches it again, a freed slot or the deferral lets the polling
    -- path take it.
    SELECT run_id FROM ready
    WHERE paused OR run_id IN (SELECT run_id FROM refused UNION ALL SELECT run_id FROM deferred)
)
