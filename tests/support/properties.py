"""Hypothesis settings of the suite, so that a property fails on a wrong property only.

- The default profile (loaded by ``tests/conftest.py``) has no deadline and no ``too_slow``
  health check: how long an example takes says how busy the machine is, not whether the
  property holds.
- :data:`ON_DATABASE`, for properties checked against Postgres, is also derandomized: the
  same examples on every run and every machine, so such a test passes or fails the same on a
  fresh clone (which has no ``.hypothesis/`` database of past failures) as where it was
  written. Use it as ``@settings(ON_DATABASE, max_examples=25)``.

Strategies generate only input the property is about: an invalid example is a failure of the
strategy, not of the code. Refusals of invalid input are tested as refusals.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

PROFILE = "awooop"
settings.register_profile(PROFILE, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ON_DATABASE = settings(
    derandomize=True,
    deadline=None,
    # The database fixtures are per test, shared by its examples: each example cleans up or
    # writes under its own keys.
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
