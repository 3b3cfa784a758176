-- phase: expand
--
-- Streamed output of runs (awooop.runs.output_log; docs/workers.md, Streamed output): what a
-- handler emits with `await run.emit_output(text)`, as an offset log of coalesced chunks, not
-- a row per token. The worker buffers a run's emitted text and flushes it at most every
-- AWOOOP_OUTPUT_FLUSH_INTERVAL_S or AWOOOP_OUTPUT_FLUSH_BYTES (and at the attempt's end,
-- before its last event), each flush one row written under the attempt's lease fence
-- (awooop/eventlog/sql/output_append.sql: a fenced-off attempt appends nothing).
--
-- - seq: the row's place in the run's log (1, 2, ...), over all its attempts: the id of a
--   server-sent event, and what a reader resumes after (Last-Event-ID, ?after=).
-- - attempt: the attempt that emitted it; a reader learns that an attempt was abandoned when
--   a later attempt's rows (or the run's attempt count) move past it.
-- - start_offset, end_offset: the chunk's place in the run's output, in UTF-8 bytes from the
--   start of the run's first attempt's output; the limit AWOOOP_OUTPUT_MAX_BYTES counts them.
-- - truncated: the marker row (empty text) written once when the limit was reached; nothing
--   is appended after it.
-- A project's own rows (row-level security, like its runs). The `dedupe_expiry` loop deletes
-- rows older than AWOOOP_OUTPUT_RETENTION_S, oldest first, through awooop_run_output_age_idx.
--
-- A new table and its indexes: nothing else is locked, and the previous release never reads
-- or writes it.
CREATE TABLE awooop_run_output (
    run_id        uuid NOT NULL,
    seq           integer NOT NULL CHECK (seq > 0),
    project_id    text NOT NULL,
    attempt       integer NOT NULL CHECK (attempt > 0),
    start_offset  bigint NOT NULL CHECK (start_offset >= 0),
    end_offset    bigint NOT NULL,
    text          text NOT NULL,
    truncated     boolean NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, seq),
    CHECK (end_offset = start_offset + octet_length(text)),
    CHECK (NOT truncated OR text = '')
);
CREATE INDEX awooop_run_output_age_idx ON awooop_run_output (created_at);
SELECT awooop_enforce_tenant_isolation('awooop_run_output');
