-- awooop.runs.deadletter_list.page of one project $7 (a tenant transaction: a read or manage
-- session, an admin naming the project): dead_letter_page.sql through
-- awooop_dead_letters_project_open_idx.
SELECT {{dead_letter_row}}
FROM (
    SELECT * FROM awooop_dead_letters
    WHERE project_id = $7
      AND {{dead_letter_window}}
) d
{{dead_letter_run_probe}}
