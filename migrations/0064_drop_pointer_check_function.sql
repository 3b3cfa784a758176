-- The pointer check (R-24) no longer calls awooop_pointer_check (0030, 0031): its connections
-- keep the tenant at session level and run the probe as a plain prepared statement
-- (awooop/revisions/pointer.py), about three times cheaper than the plpgsql function with its
-- two set_config calls. Nothing else used the function.
DROP FUNCTION awooop_pointer_check(text, text[], text[], uuid[]);
