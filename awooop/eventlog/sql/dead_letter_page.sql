-- awooop.runs.deadletter_list.page, every project the role sees (an admin's list, on the
-- platform role): a batch of at most $4 open dead letters newest first, dead-lettered since
-- $1 and before the keyset ($2, $3), through awooop_dead_letters_open_idx; each with its run's
-- channel and status and whether it matches the failure code $5 and the channel $6 (null:
-- any). The match is decided in the select list, not in the WHERE, so the scan stays one
-- bounded range of the index whatever the filters match.
SELECT d.dead_letter_id, d.project_id, d.run_id, d.source, d.group_name, d.delivery_count,
       d.event_type, d.code, d.reason, d.dead_lettered_at, rs.channel_type,
       rs.status AS run_status,
       ($5::text IS NULL OR d.code = $5)
           AND ($6::text IS NULL OR coalesce(rs.channel_type = $6, false)) AS matches
FROM (
    SELECT * FROM awooop_dead_letters
    WHERE resolved_at IS NULL
      AND dead_lettered_at >= $1
      AND (dead_lettered_at, dead_letter_id) < ($2, $3)
    ORDER BY dead_lettered_at DESC, dead_letter_id DESC
    LIMIT $4
) d
LEFT JOIN LATERAL (
    -- One probe of the run's primary key per dead letter (LIMIT keeps it a probe, never a
    -- join that reads the run table).
    SELECT r.channel_type, r.status FROM awooop_run_state r WHERE r.run_id = d.run_id LIMIT 1
) rs ON true
ORDER BY d.dead_lettered_at DESC, d.dead_letter_id DESC
