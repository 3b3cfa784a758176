"""The foundation: settings, database, errors, events, logs, metrics, tracing, and the framework
of background loops (:mod:`awooop.core.loops`, their heartbeats :mod:`awooop.core.loop_heartbeats`).

Nothing here imports anything above it (see the layer contract in ``pyproject.toml``).
"""
