-- Event-log followers (awooop/log/eventlog.py READ_FORWARD) ignore in-progress transactions of
-- other databases, which they recognise through pg_stat_activity.backend_xid; without this
-- role the column reads NULL for other users' sessions and the horizon stays conservative.
-- Followers (relay, projectors, replay) run as the platform role; tenants do not get it,
-- since it would show them other sessions' query texts.
GRANT pg_read_all_stats TO awooop_platform;
