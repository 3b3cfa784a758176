-- runs.create_run: the row apply(None, RunCreated) built, in RunState's field order (the
-- parameters are msgspec.structs.astuple(state)).
INSERT INTO awooop_run_state (
    {{run_columns}}
) VALUES (
    $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20,
    $21, $22, $23, $24, $25, $26, $27
)
