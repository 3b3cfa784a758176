-- The columns of a page of dead letters (dead_letter_page*.sql): each with its run's channel and
-- status and whether it matches the failure code $5 and the channel $6 (null: any). The match
-- is decided in the select list, not in the WHERE, so the scan stays one bounded range of the
-- index whatever the filters match.
d.dead_letter_id, d.project_id, d.run_id, d.source, d.group_name, d.delivery_count,
d.event_type, d.code, d.reason, d.dead_lettered_at, rs.channel_type,
rs.status AS run_status,
($5::text IS NULL OR d.code = $5)
    AND ($6::text IS NULL OR coalesce(rs.channel_type = $6, false)) AS matches
