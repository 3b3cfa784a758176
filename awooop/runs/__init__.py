"""Run lifecycle: the state machine, the write path, leases."""
