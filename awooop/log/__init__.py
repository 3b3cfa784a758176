"""The only room that writes the event log and the run-state rows (see WRITERS.md)."""
