-- Register projects once per statement instead of once per row (replaces 0040's row trigger).
-- A batch ingest inserts a thousand streams in one statement; the row trigger ran a thousand
-- SECURITY DEFINER calls for what is almost always one project (about 15 % of the batch's
-- time). The statement trigger reads the inserted rows from a transition table and registers
-- each distinct project once.
CREATE FUNCTION awooop_register_projects() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    INSERT INTO awooop_projects (project_id)
        SELECT DISTINCT project_id FROM awooop_new_streams
    ON CONFLICT (project_id) DO NOTHING;
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION awooop_register_projects() FROM PUBLIC;

DROP TRIGGER awooop_event_streams_register_project ON awooop_event_streams;
DROP FUNCTION awooop_register_project();

CREATE TRIGGER awooop_event_streams_register_projects
    AFTER INSERT ON awooop_event_streams
    REFERENCING NEW TABLE AS awooop_new_streams
    FOR EACH STATEMENT EXECUTE FUNCTION awooop_register_projects();
