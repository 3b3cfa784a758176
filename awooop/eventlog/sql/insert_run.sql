-- runs.create_run: the row apply(None, RunCreated) built, in RunState's field order (the
-- parameters are msgspec.structs.astuple(state)), with its start tag in the fair order
-- (migrations/0134_fair_share.sql).
INSERT INTO awooop_run_state (
    {{run_columns}}, fair_tag
)
SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20,
       $21, $22, $23, $24, $25, $26, $27, $28, $29, fair.start
FROM awooop_fair_start($2) AS fair
