-- The table of the example projection awooop.examples.read_models:OpenTickets, as the
-- service's own migration creates it: a project_id column and the runtime's tenant isolation
-- (row-level security on project_id), which `awooop projector` checks before it runs the
-- projection (E-PROJECTION-004 without it).
CREATE TABLE example_open_tickets (
    project_id  text NOT NULL,
    queue       text NOT NULL,
    open        integer NOT NULL,
    PRIMARY KEY (project_id, queue)
);
SELECT awooop_enforce_tenant_isolation('example_open_tickets');
