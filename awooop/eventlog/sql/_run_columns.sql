-- Every column of awooop_run_state, in RunState's field order: what row_to_state reads and
-- state_values gives (insert_run.sql's parameters $1..$29).
run_id,
{{run_fields}}
