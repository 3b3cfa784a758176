-- lock_timeout and statement_timeout for this session ($3 false) or transaction ($3 true).
SELECT set_config('lock_timeout', $1, $3), set_config('statement_timeout', $2, $3)
