-- awooop.core.events.run_stream_id in SQL: the stream of the run in the column ``run_id`` of
-- the rows it stands among.
'run-' || run_id
