"""The run row's reads and locks, each a named statement (``sql/run_*.sql``).

Every statement that answers a whole row names its columns through ``_run_columns.sql`` (the
row as :func:`awooop.eventlog.state.row_to_state` reads it); a lock also answers the database clock
as ``db_now``, on which the caller's decision is taken. The run domain (:mod:`awooop.runs`)
decides what to do with the rows; the writes that follow go through :mod:`awooop.eventlog.runs`.
"""

from __future__ import annotations

from awooop.eventlog import queries

GET = queries.load("run_get")
PEEK = queries.load("run_peek")
VERSION = queries.load("run_version")
FENCES = queries.load("run_fences")
LOCK = queries.load("run_lock")
LOCK_MANY = queries.load("run_lock_many")
LOCK_CLAIMABLE = queries.load("run_lock_claimable")
LOCK_DISPATCHABLE = queries.load("run_lock_dispatchable")
LOCK_FAIR = queries.load("run_lock_fair")
LOCK_EXPIRED = queries.load("run_lock_expired")
LOCK_EXPIRED_OLDEST = queries.load("run_lock_expired_oldest")
LOCK_SUSPECT = queries.load("run_lock_suspect")
LOCK_EARLIER_SESSION = queries.load("run_lock_earlier_session")
SUSPECTS_WAITING = queries.load("suspects_waiting")
PAUSED = queries.load("run_paused")
LOCK_APPROVAL_DUE = queries.load("run_lock_approval_due")
LOCK_WAIT_DUE = queries.load("run_lock_wait_due")
