-- ingest.insert_new: claims each key's dedupe rows ON CONFLICT DO NOTHING (keys sorted by the
-- caller and windows ascending, so concurrent batches lock in one order) and, for exactly the
-- keys that claimed both their windows, inserts the run rows ($10: the rows apply(None,
-- RunCreated) built, as one JSON array of objects whose field names are the column names),
-- their streams at version 1 and the RunCreated events ($8, built by encode_event). Every
-- JSON parameter is text encoded in Python, so the statement needs no JSON codec of the
-- connection (a producer's own connection may have none, or its own). SQL only picks the new keys
-- and stamps the database clock: now() becomes the event's ``at`` and the row's
-- created_at/updated_at (one value per transaction).
--
-- A key claims two rows, in the current dedupe window and the next (migrations/
-- 0112_partitioned_dedupe.sql says why); a key with a row that has not expired in an older
-- window back to win(now() - TTL) is not claimed at all. A key that claimed only one of its
-- two windows lost a race: it comes back as ``orphan`` with the run id its half row carries,
-- and the caller deletes that half before it looks again (awooop.ingest.ingest_write).
--
-- Then, for the other keys, the newest existing row as the snapshot sees it (in the current
-- or next window, or a live one in an older window), with whether it is past expires_at: one
-- backward probe of the primary key per key, pruned to the windows the TTL spans (LIMIT 1 keeps
-- the lateral subquery from being flattened into a join that the planner, on stale
-- statistics, turns into a scan of the whole project and channel): _dedupe_probe.sql, which
-- dedupe_lookup.sql asks on its own. $4 is the dedupe TTL in seconds, $5 the run ids.
--
-- The guard: the transaction's tenant setting, its isolation and whether the login's binding
-- allows project $1 (awooop_tenant_bound, migrations/0090). A role outside awooop_producer, as
-- the runtime's own, is not bound and reads nothing more. A producer login bound to $1 has its
-- row in awooop_my_grants (migrations/0153: one index probe, no function call); only a login
-- without it asks awooop_tenant_bound, which also answers for superusers and BYPASSRLS roles
-- (members of every role), so the result is awooop_tenant_bound's. Unless the tenant is $1 and the binding allows it,
-- nothing is claimed, so nothing is written and no policy raises (a caller's transaction stays
-- usable); the guard's own row (provider_event_id NULL) says why, and awooop.ingest.ingest_write
-- raises the coded error before it reads any other row.
--
-- The heads and the events are selected from the run insert's RETURNING, so each is written
-- after its run row: a producer login's policies ask awooop_run_of_project (migrations/
-- 0115_stream_names.sql) whether a run stream is a run of its project, and that function sees
-- the rows this statement wrote before the call.
WITH guard AS (
    SELECT current_setting('awooop.project_id', true) AS tenant,
           current_setting('transaction_isolation') AS isolation,
           NOT pg_has_role(current_user, 'awooop_producer', 'USAGE')
               OR EXISTS (SELECT FROM awooop_my_grants m WHERE m.project = $1)
               OR awooop_tenant_bound($1) AS bound
), fresh AS (
    SELECT k.provider_event_id, k.run_id, k.ord
    FROM unnest($3::text[], $5::uuid[]) WITH ORDINALITY AS k(provider_event_id, run_id, ord)
    WHERE (SELECT g.tenant = $1 AND g.bound FROM guard g)
      AND NOT EXISTS (
        SELECT FROM awooop_channel_event_dedupe o
        WHERE o.project_id = $1 AND o.channel_type = $2
          AND o.provider_event_id = k.provider_event_id
          AND o.window_start >= awooop_dedupe_window(now() - make_interval(secs => $4::float8))
          AND o.window_start < awooop_dedupe_window(now())
          AND o.expires_at > now())
), claimed AS (
    INSERT INTO awooop_channel_event_dedupe AS d
        (project_id, channel_type, provider_event_id, window_start, run_id, created_at,
         expires_at)
    SELECT $1, $2, f.provider_event_id, w.window_start, f.run_id, now(),
           now() + make_interval(secs => $4::float8)
    FROM fresh f
    CROSS JOIN (VALUES (awooop_dedupe_window(now())),
                       (awooop_dedupe_window(now()) + interval '7 days')) AS w(window_start)
    ORDER BY f.ord, w.window_start
    ON CONFLICT (project_id, channel_type, provider_event_id, window_start) DO NOTHING
    RETURNING d.provider_event_id, d.run_id
), claims AS (
    SELECT provider_event_id, run_id, count(*) = 2 AS whole
    FROM claimed GROUP BY provider_event_id, run_id
), new AS (
    SELECT provider_event_id, run_id FROM claims WHERE whole
), runs AS (
    INSERT INTO awooop_run_state (
        {{run_columns}}, fair_tag
    )
    SELECT {{run_columns}}, {{fair_tag}}
    FROM (
        -- the rows as given, with the database clock over created_at and updated_at, and each
        -- run's place among the new ones in the order given (its project's fair order)
        SELECT stamped.*, row_number() OVER (ORDER BY given.ord) AS place
        FROM jsonb_array_elements($10::text::jsonb) WITH ORDINALITY AS given(doc, ord)
        CROSS JOIN LATERAL jsonb_populate_record(
            NULL::awooop_run_state,
            given.doc || jsonb_build_object('created_at', now(), 'updated_at', now())) AS stamped
        WHERE stamped.run_id IN (SELECT run_id FROM new)
    ) AS r
    CROSS JOIN awooop_fair_start($1) AS fair
    RETURNING run_id
), heads AS (
    INSERT INTO awooop_event_streams (stream_id, project_id, version, last_tx_id)
    SELECT h.stream_id, $1, 1, pg_current_xact_id()
    FROM unnest($6::text[], $5::uuid[]) AS h(stream_id, run_id)
    WHERE h.run_id IN (SELECT run_id FROM runs)
), events AS (
    INSERT INTO awooop_events
        (event_id, stream_id, version, project_id, event_type, data, metadata)
    SELECT e.event_id, e.stream_id, 1, $1, 'RunCreated',
           jsonb_set(e.data::jsonb, '{at}', to_jsonb(now())), e.metadata::jsonb
    FROM unnest($6::text[], $5::uuid[], $7::uuid[], $8::text[], $9::text[])
        WITH ORDINALITY AS e(stream_id, run_id, event_id, data, metadata, ord)
    WHERE e.run_id IN (SELECT run_id FROM runs)
    ORDER BY e.ord
)
SELECT provider_event_id, run_id, whole AS created, false AS expired, NOT whole AS orphan,
       NULL::text AS tenant, NULL::text AS isolation, NULL::boolean AS bound
FROM claims
UNION ALL
SELECT NULL, NULL, false, false, false, g.tenant, g.isolation, g.bound
FROM guard g
UNION ALL
SELECT d.provider_event_id, d.run_id, false, d.expires_at <= now(), false, NULL, NULL, NULL
{{dedupe_probe}}
