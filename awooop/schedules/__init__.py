"""Schedules (docs/schedules.md): a run of a contract at every fire time of a cron in a time zone.

- :mod:`awooop.schedules.cron`: when a schedule fires (pure; cronsim, daylight saving rules);
- :mod:`awooop.schedules.rules`: a schedule's definition checked, catch-up, jitter and the
  fire keys (pure);
- :mod:`awooop.schedules.store`: the ``awooop_schedules`` rows (create, list, pause, ...);
- :mod:`awooop.schedules.fire`: one fire, through intake, in a tenant transaction;
- :mod:`awooop.loops.schedules`: the platform loop that fires due schedules.
"""
