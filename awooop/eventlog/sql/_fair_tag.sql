-- A new run's start tag in the fair order between projects (migrations/0134_fair_share.sql):
-- ``fair`` is awooop_fair_start(project) and ``r.place`` the run's place (1, 2, ...) among the
-- runs of its project that the statement inserts, in the order they were given.
fair.start + (r.place - 1) * fair.step
