"""Run lifecycle: the run store, leases, approvals, control, dead-letter redrive, reads.

The state machine itself (``apply``) is the log room's: :mod:`awooop.eventlog.state`.
"""
