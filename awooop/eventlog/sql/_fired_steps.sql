-- The journal of the run row ``r`` after apply(state, TimerFired) of its wait ``w`` (step,
-- kind): the wait's entry ended, "fired" for a sleep, "timeout" for an event wait
-- (awooop.eventlog.wait_state.journaled). _fire_written.sql and fire_claim.sql set it.
coalesce(r.saga_steps, '{}'::jsonb) || jsonb_build_object(
    w.step,
    CASE WHEN jsonb_typeof(r.saga_steps -> w.step) = 'object'
         THEN r.saga_steps -> w.step ELSE '{}'::jsonb END
    || jsonb_build_object('ended', CASE WHEN w.kind = 'sleep' THEN 'fired'
                                        ELSE 'timeout' END))
