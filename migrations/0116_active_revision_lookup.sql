-- A revision's "is it active" lookup by revision id (awooop/revisions/reads.py: SELECT_REVISION
-- and LIST_REVISIONS join awooop_active_revisions ON active_revision_id = revision_id).
--
-- Without this index the join read every project's pointers: a sequential scan of the table,
-- with each row then checked against the tenant policy. Small while contracts are few, but a
-- cost that grows with every other project's contracts, paid by each tenant request that shows
-- a revision (tests/integration/test_tenant_read_plans.py checks that every statement a
-- management or console request runs can be served by an index, for the tenant and the platform
-- role). The table holds one row per contract, so the build's lock is brief.
CREATE INDEX awooop_active_revisions_revision_idx ON awooop_active_revisions (active_revision_id);
