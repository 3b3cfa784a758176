"""The background-loop framework and the registration of every loop."""
