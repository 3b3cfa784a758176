-- phase: expand
--
-- The step a running attempt is in, and since when: what the run page and blocked_on show
-- while a long step runs (a step is journaled only when it ends).
--
-- Like the lease clock, these columns are not folded from the log: the worker keeps its
-- attempts' current step in memory and the heartbeat's one renewal statement per interval
-- (renew_leases.sql) writes it with the lease, so a step costs no statement of its own.
-- current_step_attempt is the attempt that reported it: readers show the step only while
-- that attempt holds the run (RUNNING or WAITING_TOOL, attempt_count equal), so the writers
-- that end an attempt need not clear it, and rows written by processes that do not know the
-- columns read as "no step known". Replay leaves them out of the comparison, and a swap
-- carries them over with the lease clock.
--
-- Nullable, no default: a catalog change, no rewrite; code that does not know them still runs.
ALTER TABLE awooop_run_state
    ADD COLUMN current_step text,
    ADD COLUMN current_step_started_at timestamptz,
    ADD COLUMN current_step_attempt int;
