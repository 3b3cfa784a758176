-- awooop.runs.deadletter_list.page, every project the role sees (an admin's list, on the
-- platform role): a batch of open dead letters through awooop_dead_letters_open_idx.
SELECT {{dead_letter_row}}
FROM (
    SELECT * FROM awooop_dead_letters
    WHERE {{dead_letter_window}}
) d
{{dead_letter_run_probe}}
