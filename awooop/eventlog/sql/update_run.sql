-- runs.apply_and_store(_many): the whole row as apply(state, event) returned it, in RunState's
-- field order (the parameters are msgspec.structs.astuple(state), $1 = run_id). The caller
-- holds the row locked.
UPDATE awooop_run_state SET (
    {{run_fields}}
) = (
    $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21,
    $22, $23, $24, $25, $26, $27, $28, $29
)
WHERE run_id = $1
