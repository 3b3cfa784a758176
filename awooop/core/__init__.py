"""The foundation: settings, database, errors, events, logs, metrics and tracing.

Nothing here imports anything above it (see the layer contract in ``pyproject.toml``).
"""
