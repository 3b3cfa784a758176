-- The run of each dead letter of a page (dead_letter_page*.sql), newest first.
LEFT JOIN LATERAL (
    -- One probe of the run's primary key per dead letter (LIMIT keeps it a probe, never a
    -- join that reads the run table).
    SELECT r.channel_type, r.status FROM awooop_run_state r WHERE r.run_id = d.run_id LIMIT 1
) rs ON true
ORDER BY d.dead_lettered_at DESC, d.dead_letter_id DESC
