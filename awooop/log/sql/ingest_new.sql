-- ingest.insert_new: the dedupe rows ON CONFLICT DO NOTHING (keys sorted by the caller, so
-- concurrent batches lock in one order) and, for exactly the keys inserted, the run rows
-- ($10: the rows apply(None, RunCreated) built, as JSON objects whose field names are the
-- column names), their streams at version 1 and the RunCreated events ($8, built by
-- encode_event). SQL only picks the new keys and stamps the database clock: now() becomes the
-- event's ``at`` and the row's created_at/updated_at (one value per transaction). Then the
-- existing rows of the other keys as the snapshot sees them, with whether each is past
-- expires_at: one probe of the unique index per key (LIMIT 1 keeps the lateral subquery from
-- being flattened into a join that the planner, on stale statistics, turns into a scan of the
-- whole project and channel; awooop.ingest.store.LOOKUP_DEDUPE is the same probe on its own).
WITH new AS (
    INSERT INTO awooop_channel_event_dedupe AS d
        (project_id, channel_type, provider_event_id, run_id, created_at, expires_at)
    SELECT $1, $2, k.provider_event_id, k.run_id, now(),
           now() + make_interval(secs => $5::float8)
    FROM unnest($3::text[], $4::uuid[]) WITH ORDINALITY AS k(provider_event_id, run_id, ord)
    ORDER BY k.ord
    ON CONFLICT (project_id, channel_type, provider_event_id) DO NOTHING
    RETURNING d.provider_event_id, d.run_id
), runs AS (
    INSERT INTO awooop_run_state (
        run_id, project_id, channel_type, provider_event_id, contract_id, status, version,
        attempt_count, max_attempts, worker_id, lease_until, heartbeat_at, reaped_at,
        failure_reason, failure_code, saga_steps, input, result, waiting_for,
        approval_expires_at, created_at, updated_at, finished_at
    )
    SELECT r.run_id, r.project_id, r.channel_type, r.provider_event_id, r.contract_id,
           r.status, r.version, r.attempt_count, r.max_attempts, r.worker_id, r.lease_until,
           r.heartbeat_at, r.reaped_at, r.failure_reason, r.failure_code, r.saga_steps,
           r.input, r.result, r.waiting_for, r.approval_expires_at, now(), now(),
           r.finished_at
    FROM jsonb_populate_recordset(NULL::awooop_run_state, $10::jsonb) AS r
    WHERE r.run_id IN (SELECT run_id FROM new)
), heads AS (
    INSERT INTO awooop_event_streams (stream_id, project_id, version, last_tx_id)
    SELECT h.stream_id, $1, 1, pg_current_xact_id()
    FROM unnest($6::text[], $4::uuid[]) AS h(stream_id, run_id)
    WHERE h.run_id IN (SELECT run_id FROM new)
), events AS (
    INSERT INTO awooop_events
        (event_id, stream_id, version, project_id, event_type, data, metadata)
    SELECT e.event_id, e.stream_id, 1, $1, 'RunCreated',
           jsonb_set(e.data::jsonb, '{at}', to_jsonb(now())), e.metadata::jsonb
    FROM unnest($6::text[], $4::uuid[], $7::uuid[], $8::text[], $9::text[])
        WITH ORDINALITY AS e(stream_id, run_id, event_id, data, metadata, ord)
    WHERE e.run_id IN (SELECT run_id FROM new)
    ORDER BY e.ord
)
SELECT provider_event_id, run_id, true AS created, false AS expired FROM new
UNION ALL
SELECT d.provider_event_id, d.run_id, false, d.expires_at <= now()
FROM unnest($3::text[]) AS k(provider_event_id)
CROSS JOIN LATERAL (
    SELECT e.provider_event_id, e.run_id, e.expires_at
    FROM awooop_channel_event_dedupe e
    WHERE e.project_id = $1 AND e.channel_type = $2 AND e.provider_event_id = k.provider_event_id
    LIMIT 1
) AS d
